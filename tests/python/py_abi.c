/* tests/python/py_abi.c — prints the layout of every public struct that the
 * Python package mirrors with ctypes (python/einsummable/_lib.py), one line
 * per field: "STRUCT FIELD OFFSET SIZE", then "STRUCT sizeof SIZE", and the
 * constants it copies: "const NAME VALUE".
 * tests/python/test_abi.py compares these with the ctypes declarations, so a
 * field added, moved or resized in the header fails the test instead of
 * corrupting memory at run time. */
#include <stddef.h>
#include <stdio.h>

#include "include/einsummable/einsummable.h"

#define F(s, f) printf("%s %s %zu %zu\n", #s, #f, offsetof(s, f), sizeof(((s *)0)->f))
#define Z(s) printf("%s sizeof %zu\n", #s, sizeof(s))

int main(void)
{
    F(ein_error, code); F(ein_error, msg); Z(ein_error);
    F(ein_tensor_desc, rank); F(ein_tensor_desc, shape); F(ein_tensor_desc, dtype);
    F(ein_tensor_desc, dim_names); Z(ein_tensor_desc);
    F(ein_plan_options, selector); F(ein_plan_options, seed); F(ein_plan_options, linear_paths);
    Z(ein_plan_options);
    F(ein_compile_options, selector); F(ein_compile_options, plan_seed);
    F(ein_compile_options, linear_paths); F(ein_compile_options, objective);
    F(ein_compile_options, plan_only);
    F(ein_compile_options, naive_exchanges); F(ein_compile_options, search_work);
    F(ein_compile_options, search_cap_ms); F(ein_compile_options, topology);
    F(ein_compile_options, backend); F(ein_compile_options, gpu_ids);
    F(ein_compile_options, worker); F(ein_compile_options, gpu_probe);
    F(ein_compile_options, rewrite);
    F(ein_compile_options, rewrite_weights); F(ein_compile_options, ilp);
    F(ein_compile_options, seed); F(ein_compile_options, progress);
    F(ein_compile_options, exchange_chunks);
    F(ein_compile_options, no_reuse); F(ein_compile_options, partials);
    F(ein_compile_options, memory_limit); F(ein_compile_options, strategy);
    F(ein_compile_options, calibration);
    Z(ein_compile_options);
    F(ein_backend_info, name); F(ein_backend_info, label); F(ein_backend_info, device);
    F(ein_backend_info, worker); F(ein_backend_info, built); F(ein_backend_info, probed);
    F(ein_backend_info, host_visible); F(ein_backend_info, graphs_default);
    F(ein_backend_info, auto_pick); F(ein_backend_info, host_times); Z(ein_backend_info);
    F(ein_session_options, backend); F(ein_session_options, gpu_ids);
    F(ein_session_options, worker); F(ein_session_options, worker_timeout);
    F(ein_session_options, run_timeout); F(ein_session_options, instr_timeout);
    F(ein_session_options, graphs); F(ein_session_options, verbose);
    F(ein_session_options, log_dir); F(ein_session_options, log_level);
    F(ein_session_options, trace_path); F(ein_session_options, wrapper);
    F(ein_session_options, wrapper_device); F(ein_session_options, debug_device);
    F(ein_session_options, manual); F(ein_session_options, handle_signals);
    F(ein_session_options, store_paths); F(ein_session_options, generate_missing);
    F(ein_session_options, progress);
    F(ein_session_options, fake_hosts); F(ein_session_options, hosts_file);
    F(ein_session_options, connect_timeout);
    F(ein_session_options, launcher); F(ein_session_options, devices_per_host);
    F(ein_session_options, listen);
    F(ein_session_options, transport);
    Z(ein_session_options);
    F(ein_run_stats, wall_s); F(ein_run_stats, ndev); F(ein_run_stats, dev);
    F(ein_run_stats, graphs); F(ein_run_stats, device_timed);
    Z(ein_run_stats);
    F(ein_prediction, time); F(ein_prediction, makespan); F(ein_prediction, path_compute);
    F(ein_prediction, path_comm); F(ein_prediction, path_wait); F(ein_prediction, ndev);
    F(ein_prediction, dev); F(ein_prediction, calibration); Z(ein_prediction);
    F(ein_dtype_entry, name); F(ein_dtype_entry, npy); F(ein_dtype_entry, st);
    F(ein_dtype_entry, size); F(ein_dtype_entry, block_bytes); F(ein_dtype_entry, block);
    F(ein_dtype_entry, is_float); Z(ein_dtype_entry);
    F(ein_op_entry, name); F(ein_op_entry, op_class); F(ein_op_entry, takes_c); Z(ein_op_entry);
    printf("ein_dtype sizeof %zu\n", sizeof(ein_dtype));
    /* Constants: "const NAME VALUE". */
#define K(n) printf("const %s %d\n", #n, (int)(n))
    K(EIN_F32); K(EIN_F16); K(EIN_BF16); K(EIN_DESC_MAX_RANK); K(EIN_ERROR_MSG_MAX);
    K(EIN_EINVAL); K(EIN_ENOMEM); K(EIN_EIO); K(EIN_EPARSE); K(EIN_ESHAPE); K(EIN_EPROTO);
    K(EIN_ENOPLAN); K(EIN_ETIMEOUT); K(EIN_EWORKER); K(EIN_EUNSUPPORTED); K(EIN_EDEVICE);
    K(EIN_ELIMIT); K(EIN_ROPE_INTERLEAVED); K(EIN_ROPE_HALF);
    K(EIN_ECANCELED);
    K(EIN_OP_UNARY); K(EIN_OP_BINARY); K(EIN_OP_REDUCE);
    return 0;
}
