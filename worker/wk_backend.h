/* worker/wk_backend.h — placeholder */
