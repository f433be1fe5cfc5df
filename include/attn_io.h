/*
 * attn_io.h — file formats on top of attn.h: NumPy .npy arrays and Hugging Face
 * safetensors files (mapped read-only and strictly validated, zero-copy views, F32/BF16/F16
 * conversion, sharded checkpoints, written atomically), and the attention layers a
 * checkpoint's tensor names describe. Same conventions as attn.h: no function aborts or
 * prints; messages name the path, the tensor or the byte offset. See docs/formats.md.
 * Libraries (docs/install.md): the .npy section is in libattn itself; the safetensors and
 * tensor-name sections are in libattn_io (-lattn_io, cJSON).
 */
#ifndef ATTN_IO_H
#define ATTN_IO_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 * Section: NumPy .npy files
 * ====================================================================================== */

/*
 * An array read from a .npy file. The library allocates `data` (free with attn_npy_free).
 * Only little-endian, C-order arrays of dtype <f4, <f8, |b1 / |u1, <i4, <i8, <f2 are read;
 * Fortran order, big-endian data, object arrays, rank > 4 and truncated files are errors.
 */
typedef struct attn_npy_array {
    attn_dtype dtype;
    int rank;                       /* 0..4; a 0-d array has rank 0 and one element */
    int64_t shape[ATTN_MAX_RANK];
    void *data;
    size_t byte_count;
} attn_npy_array;

/* Reads `path`. Errors: ATTN_ERROR_IO (missing, unreadable, truncated), ATTN_ERROR_FORMAT
 * (bad magic, malformed header, Fortran order, unsupported dtype or rank), overflow, memory
 * (memory_limit_bytes > 0 caps the data size). The message names the path. */
ATTN_API attn_status attn_npy_read(const char *path, size_t memory_limit_bytes,
                                   attn_npy_array *array, attn_error *error);

/* Parses a .npy image already in memory (the reader's core; used by the fuzzer). */
ATTN_API attn_status attn_npy_parse(const void *bytes, size_t byte_count, size_t memory_limit_bytes,
                                    attn_npy_array *array, attn_error *error);

/* Writes a C-order .npy (format 1.0). The file is written to a temporary name and renamed,
 * so a failure never leaves a partial file at `path`. `data` is contiguous. */
ATTN_API attn_status attn_npy_write(const char *path, attn_dtype dtype, int rank,
                                    const int64_t *shape, const void *data, attn_error *error);

/* Frees an array's data and zeroes it. NULL is allowed. */
ATTN_API void attn_npy_free(attn_npy_array *array);

/* ======================================================================================
 * Section: safetensors files
 * ====================================================================================== */

/*
 * safetensors (Hugging Face): an 8-byte little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}   (optional metadata, strings only)
 * padded with spaces, then the data buffer; offsets are relative to the buffer's start.
 * The header is parsed with cJSON. The reader is strict: N <= ATTN_SAFETENSORS_MAX_HEADER_BYTES,
 * the header starts with '{' and is one JSON object followed only by whitespace; every
 * tensor's [begin, end) lies in the buffer, end - begin equals numel × dtype size, tensors
 * neither overlap nor leave holes (the buffer is covered exactly), names are unique and
 * 1..255 bytes, numbers are non-negative integers <= 2^53 written without sign, fraction,
 * exponent or leading zero, strings hold no control characters or \u0000 and are valid
 * UTF-8, entries have exactly the fields dtype, shape, data_offsets, ranks are 0..4.
 * Metadata keys and values may have any length (within the header). Dtypes: F32, F16, BF16,
 * F64, I32, I64, BOOL become attn's; the format's other whole-byte dtypes (U8, I8, I16, U16,
 * U32, U64, F8_E4M3, F8_E5M2, F8_E8M0) are listed with dtype ATTN_SAFETENSORS_DTYPE_OTHER
 * (stored_dtype names them) and refused by the conversion and view functions; any other
 * dtype is ATTN_ERROR_FORMAT naming the tensor and the dtype. docs/formats.md describes the
 * format and the limits.
 */
#define ATTN_SAFETENSORS_NAME_CAPACITY 256 /* longest name + 1; longer names: FORMAT error */
#define ATTN_SAFETENSORS_MAX_HEADER_BYTES ((uint64_t)100 << 20) /* 100 MiB, as the reference */
/* The dtype of a parsed tensor whose stored dtype attn has no type for (see stored_dtype). */
#define ATTN_SAFETENSORS_DTYPE_OTHER ((attn_dtype)255)

/* One tensor: a parsed file's entry, or one to write. */
typedef struct attn_safetensors_tensor {
    char name[ATTN_SAFETENSORS_NAME_CAPACITY]; /* NUL-terminated UTF-8 */
    attn_dtype dtype;
    int rank;                     /* 0..4 (0: a scalar of one element) */
    int64_t shape[ATTN_MAX_RANK]; /* each >= 0 */
    const void *data;             /* little-endian elements, C order; not necessarily aligned;
                                     read-only (a mapped file's pages are mapped read-only) */
    size_t byte_count;            /* numel × dtype size (ignored by the writer) */
    int shard;                    /* parsed: index in file->shards (ignored by the writer) */
    char stored_dtype[12];        /* parsed: the file's dtype text, "BF16", "F8_E4M3", ...
                                     (ignored by the writer) */
} attn_safetensors_tensor;

/* A metadata entry: NUL-terminated UTF-8 strings of any length. In a parsed file they
 * belong to the file (valid until attn_safetensors_free); the writer only reads them. */
typedef struct attn_safetensors_metadata {
    const char *key;
    const char *value;
} attn_safetensors_metadata;

/* One file of a parsed checkpoint. */
typedef struct attn_safetensors_shard {
    const char *path;    /* the file read (NULL for an image given to attn_safetensors_parse) */
    const void *bytes;   /* the whole file image: mapped read-only, read, or the caller's */
    size_t byte_count;
    size_t data_offset;  /* 8 + N: where the data buffer starts in `bytes` */
    int mapped;          /* 1: `bytes` is a read-only mmap of the file (zero-copy) */
} attn_safetensors_shard;

/*
 * A parsed file, or a sharded checkpoint (attn_safetensors_open): one list of tensors
 * whatever the number of files. `tensors` are in file order (shard by shard, by data
 * offset); their `data` point into the shards' images. attn_safetensors_free releases what
 * the struct owns (mappings, copies, strings, lists).
 */
typedef struct attn_safetensors_file {
    int64_t tensor_count;
    attn_safetensors_tensor *tensors;
    int64_t metadata_count;
    attn_safetensors_metadata *metadata;
    const void *bytes;   /* one file: its whole image (shards[0].bytes); sharded: NULL */
    size_t byte_count;   /* one file: its size; sharded: 0 */
    int64_t shard_count; /* 1 for one file */
    attn_safetensors_shard *shards;
    void *internal;      /* the library's bookkeeping (name index, storage); do not touch */
} attn_safetensors_file;

/* Parses a file image in memory (the reader's core; the fuzzer's entry point). The image
 * is borrowed: it must outlive the struct. Errors: ATTN_ERROR_FORMAT (message names the
 * byte offset, the tensor or the field), overflow, memory (memory_limit_bytes > 0 caps the
 * image size). On error `file` is left empty (all zero). */
ATTN_API attn_status attn_safetensors_parse(const void *bytes, size_t byte_count,
                                            size_t memory_limit_bytes, attn_safetensors_file *file,
                                            attn_error *error);

/* Maps `path` read-only (mmap; when the file cannot be mapped, e.g. a pipe, it is read into
 * memory instead) and parses it: tensor data are never copied. memory_limit_bytes > 0 caps
 * the file size (ATTN_ERROR_MEMORY_LIMIT). ATTN_ERROR_IO when it cannot be opened or read.
 * Messages name the path. */
ATTN_API attn_status attn_safetensors_read(const char *path, size_t memory_limit_bytes,
                                           attn_safetensors_file *file, attn_error *error);

/*
 * Opens a checkpoint: `path` is a .safetensors file (as attn_safetensors_read), a sharded
 * checkpoint's index file (model.safetensors.index.json: {"metadata": {...}, "weight_map":
 * {"tensor name": "shard file name", ...}}; shard names are relative to the index's folder,
 * neither absolute nor containing ".."), or a folder: its model.safetensors.index.json, else
 * model.safetensors, else its only *.safetensors.index.json, else its only *.safetensors file
 * (several candidates: ATTN_ERROR_IO naming how many). Every shard is mapped as by attn_safetensors_read; the result has
 * all tensors of all shards (tensor.shard says which). Index checks: every weight_map entry
 * is found in its shard, every shard tensor is listed under that shard, no name in two
 * shards. metadata: the index's "metadata" (values that are not strings as their JSON
 * text), then the shards' __metadata__ entries whose keys are not listed yet.
 * memory_limit_bytes > 0 caps the total size of the shards. Errors: ATTN_ERROR_IO (path,
 * missing shard), ATTN_ERROR_FORMAT (malformed index or shard: the message names the file
 * and the tensor or field), ATTN_ERROR_MEMORY_LIMIT.
 */
ATTN_API attn_status attn_safetensors_open(const char *path, size_t memory_limit_bytes,
                                           attn_safetensors_file *file, attn_error *error);

/* Frees what `file` owns (unmapping the shards) and zeroes it. NULL is allowed. */
ATTN_API void attn_safetensors_free(attn_safetensors_file *file);

/* The tensor called `name`, or NULL (binary search over a name index: O(log n)). */
ATTN_API const attn_safetensors_tensor *attn_safetensors_find(const attn_safetensors_file *file,
                                                              const char *name);

/* The metadata value of `key`, or NULL. */
ATTN_API const char *attn_safetensors_metadata_value(const attn_safetensors_file *file, const char *key);

/* The safetensors name of a dtype ("F32", "BF16", ...); NULL for none. */
ATTN_API const char *attn_safetensors_dtype_name(attn_dtype dtype);

/*
 * Copies tensor `name` into out float[numel], converting F32, BF16 or F16 to float32 (exact).
 * The stored shape must equal shape[0..rank) exactly. Errors name the tensor: missing
 * (ATTN_ERROR_FORMAT), wrong rank or shape (ATTN_ERROR_SHAPE_MISMATCH, both shapes given),
 * a dtype that is not a float type (ATTN_ERROR_FORMAT).
 */
ATTN_API attn_status attn_safetensors_get_f32(const attn_safetensors_file *file, const char *name,
                                              int rank, const int64_t *shape, float *out,
                                              attn_error *error);

/*
 * Copies tensor `name` into out[numel] of `dtype` (F32, BF16 or F16), converting from a
 * stored F32, BF16 or F16: widening is exact, narrowing rounds to nearest even (NaN stays
 * NaN, beyond the F16 range becomes ±inf). Shape as attn_safetensors_get_f32. Errors:
 * missing (FORMAT), shape (SHAPE_MISMATCH), a stored dtype other than F32/BF16/F16 (FORMAT,
 * naming the tensor and both dtypes), `dtype` not F32/BF16/F16 (INVALID_ARGUMENT).
 */
ATTN_API attn_status attn_safetensors_get(const attn_safetensors_file *file, const char *name,
                                          attn_dtype dtype, int rank, const int64_t *shape, void *out,
                                          attn_error *error);

/*
 * A zero-copy view of tensor `name`: a contiguous attn_tensor of the stored dtype and shape
 * whose data point into the file's image (a scalar is shape [1]; a tensor with a zero
 * dimension cannot be viewed). The view lives as long as `file` and is read-only.
 * Errors: missing (FORMAT), ATTN_ERROR_UNSUPPORTED when the data are not aligned to the
 * element size, or numel = 0 (the message says which; attn_safetensors_get copies instead).
 */
ATTN_API attn_status attn_safetensors_view(const attn_safetensors_file *file, const char *name,
                                           attn_tensor *view, attn_error *error);

/*
 * Tensor `name` as `dtype` (F32, BF16 or F16) of shape[0..rank): a zero-copy view when the
 * stored dtype is `dtype` and the data are aligned (*owned = NULL), else a converted copy
 * in memory the function allocates (*owned = that memory; free() it after use). `out` is a
 * contiguous tensor of rank max(rank, 1). Errors: as attn_safetensors_get, and
 * ATTN_ERROR_OUT_OF_MEMORY. On error *owned is NULL.
 */
ATTN_API attn_status attn_safetensors_tensor_as(const attn_safetensors_file *file, const char *name,
                                                attn_dtype dtype, int rank, const int64_t *shape,
                                                attn_tensor *out, void **owned, attn_error *error);

/*
 * Writes `tensor_count` tensors (their data contiguous, in the order given) and optional
 * metadata (NULL / 0 for none) to `path`, via a temporary file renamed into place, so a
 * failure never leaves a partial file at `path`. Names must be unique, non-empty and not
 * "__metadata__"; metadata keys and values non-NULL. The data buffer starts 8-byte aligned.
 * Errors: ATTN_ERROR_IO, ATTN_ERROR_INVALID_ARGUMENT naming the tensor.
 */
ATTN_API attn_status attn_safetensors_write(const char *path, const attn_safetensors_tensor *tensors,
                                            int64_t tensor_count,
                                            const attn_safetensors_metadata *metadata,
                                            int64_t metadata_count, attn_error *error);

/* ---- attention layers recognised in a checkpoint by their tensor names ---------------- */

/* How a checkpoint names an attention layer's projections. */
typedef enum attn_name_scheme {
    ATTN_NAMES_QKVO = 1, /* P{q,k,v,o}_proj.{weight,bias}: Llama, Mistral, Qwen2, attn's own
                            layers (attn_layer_save_safetensors); P = "model.layers.N.self_attn." */
    ATTN_NAMES_BERT = 2, /* P self.{query,key,value}.*, P output.dense.*; P = "encoder.layer.N.attention." */
    ATTN_NAMES_GPT2 = 3, /* P c_attn.* (fused Q|K|V, Conv1D [in, out]), P c_proj.*; P = "h.N.attn." */
    ATTN_NAMES_MLA = 4   /* DeepSeek-V2 multi-head latent attention: P q_proj or P q_a_proj +
                            q_a_layernorm + q_b_proj, P kv_a_proj_with_mqa, kv_a_layernorm,
                            kv_b_proj, o_proj; P = "model.layers.N.self_attn." */
} attn_name_scheme;

/* The roles of a layer's tensors (bit i of the masks below = role i). */
typedef enum attn_name_role {
    ATTN_ROLE_Q = 0, ATTN_ROLE_K = 1, ATTN_ROLE_V = 2, ATTN_ROLE_O = 3,
    ATTN_ROLE_QKV = 4,                /* GPT-2's fused c_attn */
    ATTN_ROLE_Q_A = 5, ATTN_ROLE_Q_A_NORM = 6, ATTN_ROLE_Q_B = 7, /* MLA query low rank */
    ATTN_ROLE_KV_A = 8, ATTN_ROLE_KV_A_NORM = 9, ATTN_ROLE_KV_B = 10, /* MLA latent KV */
    ATTN_ROLE_COUNT = 11
} attn_name_role;

/* One attention layer found in a list of tensor names. */
typedef struct attn_named_layer {
    attn_name_scheme scheme;
    const char *family;     /* "llama" (q/k/v/o, no biases: Llama, Mistral, attn without
                               bias), "qwen2" (biases on q, k, v only), "attn" (biases on all
                               four: attn layers with bias), "q/k/v/o_proj" (other bias
                               patterns), "bert", "gpt2", "deepseek-v2" (MLA) */
    int64_t index;          /* the layer number in the prefix (last ".N."), -1 when none */
    char prefix[ATTN_SAFETENSORS_NAME_CAPACITY]; /* e.g. "model.layers.3.self_attn." */
    unsigned weights;       /* roles whose P<role>.weight is present (bit = attn_name_role) */
    unsigned biases;        /* roles whose P<role>.bias is present */
    unsigned missing;       /* roles the scheme requires whose weight is absent (0 = complete) */
} attn_named_layer;

/* The name suffix of a role under a scheme ("q_proj", "self.query", "c_attn", ...), NULL
 * when the scheme has no such role. The tensor names are prefix + suffix + ".weight"/".bias". */
ATTN_API const char *attn_named_layer_suffix(attn_name_scheme scheme, attn_name_role role);

/*
 * Finds the attention layers in `names` (count NUL-terminated tensor names, any order;
 * duplicates allowed). A layer is anchored by the name of its scheme's key tensor
 * (k_proj, self.key, c_attn, kv_a_proj_with_mqa weights) and reported with the masks of its
 * tensors found; `missing` lists required weights absent. layers: room for `capacity`
 * entries (may be NULL when capacity is 0); *found receives the number of layers in the
 * names (which may exceed capacity: only the first `capacity`, by (index, prefix), are
 * written). Errors: NULL arguments, count or capacity < 0, out of memory.
 */
ATTN_API attn_status attn_named_layers_find(const char *const *names, int64_t count,
                                            attn_named_layer *layers, int64_t capacity, int64_t *found,
                                            attn_error *error);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_IO_H */
