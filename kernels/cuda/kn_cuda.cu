/* placeholder */
extern "C" int kn_cuda_placeholder(void) { return 0; }
