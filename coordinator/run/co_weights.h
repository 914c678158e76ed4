/* coordinator/run/co_weights.h — bind the tensors of .safetensors files to a
 * graph's inputs: the one function `einrun --weights`, the session API
 * (ein_session_load_safetensors) and the Python package call.
 *
 * co_weights_bind() decides, for every input of `g`, whether it is read
 * from one of `files` (opened with ein_safetensors_open) and from which
 * tensor:
 *   - each entry of `map` ({input, tensor}) binds graph input `input` to the
 *     tensor named `tensor`; the input must exist and be an input, the
 *     tensor must exist in exactly one file, and no input may be mapped
 *     twice or already have a source in `src` (an --input .npy);
 *   - every other input that has no source yet is bound to the tensor of the
 *     same name, if one file has it (default: same name); inputs no file
 *     names are left alone (generated, or whatever `src` already says).
 * Every bound pair is checked: the tensor's dtype must be the input's
 * (F32 = f32, F16 = f16, BF16 = bf16, I32 = i32, I64 = i64; any other
 * safetensors dtype is
 * refused by name) and its shape exactly the input's shape (no implicit
 * transpose: docs/hf-llama.md says which checkpoint tensors need one).
 *
 * On success src[v] (an array of g->nnodes entries the caller owns, zeroed
 * or pre-filled with other sources) is set for each bound input v to
 * {file's path, EIN_LOAD_RAW, tensor's absolute byte offset}: the lowering
 * (co_lower_opts.input_src) turns it into LOADs that read, on each device,
 * only that device's blocks by mmap. The paths point into `files`, which
 * must outlive `src`. *nbound (if not NULL) gets the number of inputs
 * bound. On error src is unchanged and the result is EIN_EINVAL (a --map
 * entry naming no input / no tensor / an input twice) or EIN_ESHAPE (dtype
 * or shape differ), with one line naming the file and the tensor, e.g.
 * "m.safetensors: tensor 'wq' is F32 [8, 4] but input wq is f32 [4, 8]". */
#ifndef CO_WEIGHTS_H
#define CO_WEIGHTS_H

#include "common/base/ein_error.h"
#include "common/io/ein_safetensors.h"
#include "coordinator/compile/co_lower.h"
#include "planner/pl_graph.h"

typedef struct co_weight_map {
    const char *input;   /* a graph input's name */
    const char *tensor;  /* a tensor's name in one of the files */
} co_weight_map;

int co_weights_bind(const pl_graph *g, const ein_safetensors *const *files, int nfiles,
                    const co_weight_map *map, int nmap, co_input_src *src, int *nbound,
                    ein_error *err);

/* The error for weights files of which co_weights_bind bound nothing
 * (*nbound 0: a misspelt map, the wrong file, a program whose inputs are
 * named otherwise): EIN_EINVAL naming the files, the program's inputs and
 * the files' tensors (both lists cut short where long). Never 0. */
int co_weights_none_bound(const pl_graph *g, const ein_safetensors *const *files, int nfiles,
                          ein_error *err);

/* Parse "INPUT=TENSOR" (an --map argument) into *out, pointing into `arg`'s
 * copy `*owned` (malloc'd, the caller frees it). EIN_EINVAL with a message
 * when there is no '=' or either side is empty. */
int co_weight_map_parse(const char *arg, co_weight_map *out, char **owned, ein_error *err);

/* einrun's --weights FILE ... --map INPUT=TENSOR ...: open every file
 * (ein_safetensors_open), parse the maps and co_weights_bind them; files
 * that bind no input at all are an error (co_weights_none_bound). On
 * success *files (nfiles entries, free with co_weights_files_free) holds
 * the open files the paths in `src` point into; on error (the message
 * names the file and the tensor) *files is NULL and src is unchanged. */
int co_weights_load(const pl_graph *g, const char *const *paths, int npaths,
                    const char *const *maps, int nmaps, co_input_src *src, int *nbound,
                    ein_safetensors ***files, ein_error *err);
void co_weights_files_free(ein_safetensors **files, int nfiles);
/* co_weights_load that, unless allow_unused, also refuses (EIN_EINVAL,
 * naming the first and listing them) every tensor of the files that no
 * input of g is named like and no map names (issue 34: a checkpoint and a
 * program that disagree). */
int co_weights_load_ex(const pl_graph *g, const char *const *paths, int npaths,
                       const char *const *maps, int nmaps, int allow_unused, co_input_src *src,
                       int *nbound, ein_safetensors ***files, ein_error *err);
/* That check alone. */
int co_weights_unused(const pl_graph *g, const ein_safetensors *const *files, int nfiles,
                      const co_weight_map *map, int nmap, ein_error *err);

#endif
