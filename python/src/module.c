/*
 * module.c — attn._attn, the CPython extension under the Python package `attn`.
 *
 * A thin layer: Python (python/attn/_tensors.py) turns NumPy arrays and PyTorch tensors into
 * tensor descriptors, and this module turns descriptors into attn_tensor views, calls libattn
 * with the GIL released, and turns an attn_status into a Python exception carrying attn's
 * message. It allocates nothing the caller sees and never copies tensor data.
 *
 * A tensor descriptor is the tuple (data: int, dtype: int, shape: tuple, strides: tuple):
 * the address of element [0, ..., 0], an attn_dtype value, and rank 1..4 sizes and strides
 * in elements (as attn_tensor). None stands for "no tensor" where an argument is optional.
 * The descriptors are trusted to describe memory the caller keeps alive for the call: this
 * module is private (attn._attn); the public functions in attn/__init__.py build them.
 *
 * Options are the tuple built by attn/_options.py (fields in the order parsed below).
 * Built against the Python limited API (abi3): one wheel per platform for every CPython.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <math.h>
#include <string.h>

#include "attn.h"

/* ---- errors ------------------------------------------------------------------------------ */

/* Raises the Python exception for a failed attn call: ValueError for bad arguments,
 * MemoryError for memory (allocation, limit, cache capacity), NotImplementedError for
 * a combination this build cannot serve, OSError for I/O. Returns NULL. */
static PyObject *raise_status(attn_status status, const attn_error *error) {
    PyObject *type = PyExc_ValueError;
    switch (status) {
    case ATTN_ERROR_OUT_OF_MEMORY:
    case ATTN_ERROR_MEMORY_LIMIT:
    case ATTN_ERROR_CAPACITY: type = PyExc_MemoryError; break;
    case ATTN_ERROR_UNSUPPORTED: type = PyExc_NotImplementedError; break;
    case ATTN_ERROR_IO: type = PyExc_OSError; break;
    case ATTN_ERROR_COMMUNICATION: type = PyExc_RuntimeError; break;
    default: break;
    }
    const char *message = error->message[0] ? error->message : "(no message)";
    PyErr_Format(type, "%s [%s]", message, attn_status_name(status));
    return NULL;
}

/* ---- descriptors --------------------------------------------------------------------------- */

static int parse_int64_tuple(PyObject *tuple, int rank, int64_t *values, const char *name,
                             const char *what) {
    if (!PyTuple_Check(tuple) || PyTuple_Size(tuple) != rank) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a tuple of %d ints", name, what, rank);
        return -1;
    }
    for (int d = 0; d < rank; ++d) {
        long long value = PyLong_AsLongLong(PyTuple_GetItem(tuple, d));
        if (value == -1 && PyErr_Occurred()) return -1;
        values[d] = (int64_t)value;
    }
    return 0;
}

/* Fills `t` from a descriptor. Returns 1 for a tensor, 0 for None (when allowed), -1 on
 * error (a Python exception is set). */
static int parse_tensor(PyObject *object, attn_tensor *t, const char *name, int optional) {
    memset(t, 0, sizeof *t);
    if (object == Py_None) {
        if (optional) return 0;
        PyErr_Format(PyExc_TypeError, "%s is required", name);
        return -1;
    }
    if (!PyTuple_Check(object) || PyTuple_Size(object) != 4) {
        PyErr_Format(PyExc_TypeError, "%s: expected a tensor descriptor", name);
        return -1;
    }
    t->data = PyLong_AsVoidPtr(PyTuple_GetItem(object, 0));
    if (PyErr_Occurred()) return -1;
    long dtype = PyLong_AsLong(PyTuple_GetItem(object, 1));
    if (dtype == -1 && PyErr_Occurred()) return -1;
    t->dtype = (attn_dtype)dtype;
    PyObject *shape = PyTuple_GetItem(object, 2);
    Py_ssize_t rank = PyTuple_Check(shape) ? PyTuple_Size(shape) : -1;
    if (rank < 1 || rank > ATTN_MAX_RANK) {
        PyErr_Format(PyExc_ValueError, "%s: rank must be 1..%d", name, ATTN_MAX_RANK);
        return -1;
    }
    t->rank = (int)rank;
    if (parse_int64_tuple(shape, t->rank, t->shape, name, "shape") ||
        parse_int64_tuple(PyTuple_GetItem(object, 3), t->rank, t->stride, name, "strides"))
        return -1;
    return 1;
}

/* An optional pointer passed as an int (0 = NULL). */
static int parse_pointer(PyObject *object, const void **pointer) {
    *pointer = NULL;
    if (object == Py_None) return 0;
    *pointer = PyLong_AsVoidPtr(object);
    return PyErr_Occurred() ? -1 : 0;
}

/* ---- options ------------------------------------------------------------------------------- */

/* Tensors an options tuple points at; they must outlive the call. */
typedef struct option_tensors {
    attn_tensor mask, bias;
} option_tensors;

/*
 * The options tuple (attn/_options.py builds it, in this order):
 *   (scale: float or None, alignment: int, causal: bool, window: (left, right) or None,
 *    mask: descriptor or None, bias: descriptor or None,
 *    query_lengths: int pointer or None, key_lengths: int pointer or None,
 *    alibi: bool, alibi_slopes: float pointer or None, softcap: float, empty_rows: int,
 *    sinks: float pointer or None, sink_tokens: int,
 *    dropout_p: float, dropout_seed: int (taken modulo 2^64), dropout_offset: int)
 */
static int parse_options(PyObject *tuple, attn_options *options, option_tensors *tensors) {
    *options = attn_options_default();
    if (!PyTuple_Check(tuple) || PyTuple_Size(tuple) != 17) {
        PyErr_SetString(PyExc_TypeError, "options: expected a 17-tuple");
        return -1;
    }
    PyObject *scale = PyTuple_GetItem(tuple, 0);
    if (scale != Py_None) {
        options->custom_scale = 1;
        options->scale = (float)PyFloat_AsDouble(scale);
        if (PyErr_Occurred()) return -1;
    }
    long alignment = PyLong_AsLong(PyTuple_GetItem(tuple, 1));
    if (alignment == -1 && PyErr_Occurred()) return -1;
    options->alignment = (attn_alignment)alignment;
    options->causal = PyObject_IsTrue(PyTuple_GetItem(tuple, 2));
    if (options->causal < 0) return -1;
    PyObject *window = PyTuple_GetItem(tuple, 3);
    if (window != Py_None) {
        int64_t sides[2];
        if (parse_int64_tuple(window, 2, sides, "window", "(left, right)")) return -1;
        options->window = 1;
        options->window_left = sides[0];
        options->window_right = sides[1];
    }
    int has;
    if ((has = parse_tensor(PyTuple_GetItem(tuple, 4), &tensors->mask, "mask", 1)) < 0) return -1;
    if (has) options->mask = &tensors->mask;
    if ((has = parse_tensor(PyTuple_GetItem(tuple, 5), &tensors->bias, "bias", 1)) < 0) return -1;
    if (has) options->bias = &tensors->bias;
    const void *pointer;
    if (parse_pointer(PyTuple_GetItem(tuple, 6), &pointer)) return -1;
    options->query_lengths = pointer;
    if (parse_pointer(PyTuple_GetItem(tuple, 7), &pointer)) return -1;
    options->key_lengths = pointer;
    options->alibi = PyObject_IsTrue(PyTuple_GetItem(tuple, 8));
    if (options->alibi < 0) return -1;
    if (parse_pointer(PyTuple_GetItem(tuple, 9), &pointer)) return -1;
    options->alibi_slopes = pointer;
    options->softcap = (float)PyFloat_AsDouble(PyTuple_GetItem(tuple, 10));
    if (PyErr_Occurred()) return -1;
    long empty_rows = PyLong_AsLong(PyTuple_GetItem(tuple, 11));
    if (empty_rows == -1 && PyErr_Occurred()) return -1;
    options->empty_rows = (attn_empty_rows)empty_rows;
    if (parse_pointer(PyTuple_GetItem(tuple, 12), &pointer)) return -1;
    options->sinks = pointer;
    options->sink_tokens = (int64_t)PyLong_AsLongLong(PyTuple_GetItem(tuple, 13));
    if (PyErr_Occurred()) return -1;
    options->dropout_p = (float)PyFloat_AsDouble(PyTuple_GetItem(tuple, 14));
    if (PyErr_Occurred()) return -1;
    options->dropout_seed = (uint64_t)PyLong_AsUnsignedLongLongMask(PyTuple_GetItem(tuple, 15));
    if (PyErr_Occurred()) return -1;
    options->dropout_offset = (uint64_t)PyLong_AsUnsignedLongLong(PyTuple_GetItem(tuple, 16));
    if (PyErr_Occurred()) return -1;
    return 0;
}

/* The execution tuple: (threads: int, memory_limit_bytes: int, kernel: attn_kernel_choice);
 * 0 = default / no limit / AUTO. */
static int parse_execution(PyObject *tuple, attn_execution *execution) {
    *execution = attn_execution_default();
    int threads, kernel;
    unsigned long long limit;
    if (!PyArg_ParseTuple(tuple, "iKi", &threads, &limit, &kernel)) return -1;
    execution->num_threads = threads;
    execution->memory_limit_bytes = (size_t)limit;
    execution->kernel = (attn_kernel_choice)kernel;
    return 0;
}

/* ---- forward, backward, merge -------------------------------------------------------------- */

/* forward(q, k, v, out, lse | None, options, execution) */
static PyObject *py_forward(PyObject *self, PyObject *args) {
    PyObject *qo, *ko, *vo, *outo, *lseo, *optionso, *executiono;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &qo, &ko, &vo, &outo, &lseo, &optionso, &executiono))
        return NULL;
    attn_tensor q, k, v, out, lse;
    option_tensors tensors;
    attn_options options;
    attn_execution execution;
    int has_lse;
    if (parse_tensor(qo, &q, "q", 0) < 0 || parse_tensor(ko, &k, "k", 0) < 0 ||
        parse_tensor(vo, &v, "v", 0) < 0 || parse_tensor(outo, &out, "out", 0) < 0 ||
        (has_lse = parse_tensor(lseo, &lse, "lse", 1)) < 0 ||
        parse_options(optionso, &options, &tensors) || parse_execution(executiono, &execution))
        return NULL;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status;
    Py_BEGIN_ALLOW_THREADS
    status = attn_forward(&q, &k, &v, &options, &out, has_lse ? &lse : NULL, &execution, &error);
    Py_END_ALLOW_THREADS
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

/* ---- torch tensors read here (the small-call path of attn.torch) ------------------------------ */

/* torch.Tensor and the float dtypes attn computes in, registered by attn.torch (set_torch). */
static PyObject *torch_tensor_type, *torch_dtypes[3]; /* float32, bfloat16, float16 */

/* The tensor attributes and methods torch_view reads, as interned strings made once: a
 * name made from a C string on every call (hashed, looked up) cost several microseconds a
 * call over four tensors. */
enum { NAME_DTYPE, NAME_IS_CPU, NAME_REQUIRES_GRAD, NAME_IS_NEG, NAME_IS_CONJ, NAME_SHAPE,
       NAME_STRIDE, NAME_DATA_PTR, NAME_NEW_EMPTY, TORCH_NAMES };
static PyObject *torch_names[TORCH_NAMES];

/* set_spinning_neighbours(present): attn_set_spinning_neighbours */
static PyObject *py_set_spinning_neighbours(PyObject *self, PyObject *args) {
    int present;
    if (!PyArg_ParseTuple(args, "p", &present)) return NULL;
    attn_set_spinning_neighbours(present);
    Py_RETURN_NONE;
}

/* ---- attn's parallel regions on an OpenMP runtime already loaded (PyTorch's) ------------- */

/* The entry points of the runtime: GOMP_parallel is the call gcc emits for `#pragma omp
 * parallel` (libgomp's ABI, which LLVM's and Intel's runtimes also export). */
static struct {
    void (*parallel)(void (*body)(void *), void *data, unsigned threads, unsigned flags);
    int (*thread_num)(void);
    int (*max_threads)(void);
} openmp;

typedef struct openmp_region {
    attn_region_body body;
    void *context;
} openmp_region;

static void openmp_slot(void *data) {
    const openmp_region *region = data;
    region->body(region->context, openmp.thread_num());
}

/* attn_region_runner on the runtime's team: at most its omp_get_max_threads() threads (what
 * torch.set_num_threads set; 1 inside one of its regions), the caller as thread 0. */
static void run_on_openmp(void *runner_context, int threads, attn_region_body body,
                          void *body_context) {
    (void)runner_context;
    const int most = openmp.max_threads();
    if (most < threads) threads = most;
    if (threads <= 1) {
        body(body_context, 0);
        return;
    }
    openmp_region region = {body, body_context};
    openmp.parallel(openmp_slot, &region, (unsigned)threads, 0);
}

/* use_openmp(path): runs attn's regions on the OpenMP runtime at `path` if this process has
 * already loaded it (never loads one); None: attn's own pool again. Returns whether a runtime
 * is in use. */
static PyObject *py_use_openmp(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "z", &path)) return NULL;
    if (path == NULL) {
        attn_set_region_runner(NULL, NULL);
        Py_RETURN_FALSE;
    }
    void *runtime = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (runtime == NULL) Py_RETURN_FALSE;
    void *parallel = dlsym(runtime, "GOMP_parallel"), *thread_num = dlsym(runtime, "omp_get_thread_num"),
         *max_threads = dlsym(runtime, "omp_get_max_threads");
    if (parallel == NULL || thread_num == NULL || max_threads == NULL) {
        dlclose(runtime);
        Py_RETURN_FALSE;
    }
    /* (the handle stays open: the runtime must outlive the runner) */
    *(void **)&openmp.parallel = parallel;
    *(void **)&openmp.thread_num = thread_num;
    *(void **)&openmp.max_threads = max_threads;
    attn_set_region_runner(run_on_openmp, NULL);
    Py_RETURN_TRUE;
}

/* set_torch(Tensor, float32, bfloat16, float16) */
static PyObject *py_set_torch(PyObject *self, PyObject *args) {
    PyObject *objects[4];
    if (!PyArg_ParseTuple(args, "OOOO", &objects[0], &objects[1], &objects[2], &objects[3]))
        return NULL;
    static const char *const spelled[TORCH_NAMES] = {
        "dtype", "is_cpu", "requires_grad", "is_neg", "is_conj", "shape", "stride", "data_ptr",
        "new_empty"};
    for (int n = 0; n < TORCH_NAMES; ++n)
        if (torch_names[n] == NULL && (torch_names[n] = PyUnicode_InternFromString(spelled[n])) == NULL)
            return NULL;
    for (int n = 0; n < 4; ++n) Py_INCREF(objects[n]);
    torch_tensor_type = objects[0];
    for (int n = 0; n < 3; ++n) torch_dtypes[n] = objects[n + 1];
    Py_RETURN_NONE;
}

/* The attribute (call = 0) or method result (call = 1) `name` of `object` is True. -1: an
 * error. */
static int torch_flag(PyObject *object, PyObject *name, int call) {
    PyObject *value = call ? PyObject_CallMethodObjArgs(object, name, NULL)
                           : PyObject_GetAttr(object, name);
    if (value == NULL) return -1;
    const int flag = value == Py_True;
    Py_DECREF(value);
    return flag;
}

/* *t = a plain torch tensor of rank `rank` (type exactly torch.Tensor, on the CPU, a float
 * dtype attn computes in, no gradient to record, no lazy negation or conjugation); with bhtd
 * its [B, H, T, D] dims are described as attn's [B, T, H, D]. 1: done; 0: not such a tensor
 * (the caller takes the general path); -1: a Python error. */
static int torch_view(PyObject *object, int rank, int bhtd, attn_tensor *t) {
    if (object == Py_None || (PyObject *)Py_TYPE(object) != torch_tensor_type) return 0;
    PyObject *dtype = PyObject_GetAttr(object, torch_names[NAME_DTYPE]);
    if (dtype == NULL) return -1;
    int code = -1;
    for (int n = 0; n < 3; ++n)
        if (dtype == torch_dtypes[n]) code = n; /* attn_dtype F32, BF16, F16 */
    Py_DECREF(dtype);
    if (code < 0) return 0;
    int flags[4];
    for (int n = 0; n < 4; ++n)
        if ((flags[n] = torch_flag(object, torch_names[NAME_IS_CPU + n], n >= 2)) < 0) return -1;
    if (!flags[0] || flags[1] || flags[2] || flags[3]) return 0;
    PyObject *shape = PyObject_GetAttr(object, torch_names[NAME_SHAPE]);
    PyObject *stride =
        shape ? PyObject_CallMethodObjArgs(object, torch_names[NAME_STRIDE], NULL) : NULL;
    PyObject *data =
        stride ? PyObject_CallMethodObjArgs(object, torch_names[NAME_DATA_PTR], NULL) : NULL;
    int result = data == NULL ? -1 : 0;
    if (data != NULL && PyTuple_Check(shape) && PyTuple_Size(shape) == rank &&
        PyTuple_Check(stride) && PyTuple_Size(stride) == rank) {
        memset(t, 0, sizeof *t);
        t->data = PyLong_AsVoidPtr(data);
        t->dtype = (attn_dtype)code;
        t->rank = rank;
        for (int d = 0; d < rank; ++d) {
            const int from = bhtd && (d == 1 || d == 2) ? 3 - d : d;
            t->shape[d] = PyLong_AsLongLong(PyTuple_GetItem(shape, from));
            t->stride[d] = PyLong_AsLongLong(PyTuple_GetItem(stride, from));
        }
        result = PyErr_Occurred() ? -1 : 1;
    }
    Py_XDECREF(shape), Py_XDECREF(stride), Py_XDECREF(data);
    return result;
}

/* forward_torch(q, k, v, out, lse | None, options, threads, bhtd): attn_forward on torch
 * tensors read here (torch_view); bit n of bhtd: tensor n (q, k, v, out) is [B, H, T, D].
 * True when it ran, False when a tensor is not a plain one (nothing done: the caller takes
 * the general path). lse is [B, Hq, Tq]. */
static PyObject *py_forward_torch(PyObject *self, PyObject *args) {
    PyObject *objects[5], *optionso;
    int threads, bhtd;
    if (torch_tensor_type == NULL) Py_RETURN_FALSE;
    if (!PyArg_ParseTuple(args, "OOOOOOii", &objects[0], &objects[1], &objects[2], &objects[3],
                          &objects[4], &optionso, &threads, &bhtd))
        return NULL;
    attn_tensor views[5];
    for (int n = 0; n < 5; ++n) {
        if (n == 4 && objects[4] == Py_None) break;
        const int found = torch_view(objects[n], n == 4 ? 3 : 4, bhtd >> n & 1, &views[n]);
        if (found < 0) return NULL;
        if (found == 0 || (n == 4 && views[4].dtype != ATTN_DTYPE_F32)) Py_RETURN_FALSE;
    }
    option_tensors tensors;
    attn_options options;
    if (parse_options(optionso, &options, &tensors)) return NULL;
    attn_execution execution = attn_execution_default();
    execution.num_threads = threads;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status;
    Py_BEGIN_ALLOW_THREADS
    status = attn_forward(&views[0], &views[1], &views[2], &options, &views[3],
                          objects[4] != Py_None ? &views[4] : NULL, &execution, &error);
    Py_END_ALLOW_THREADS
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_TRUE;
}

/* `object` with one more reference (Py_NewRef, which the 3.9 limited API lacks). */
static PyObject *new_reference(PyObject *object) {
    Py_INCREF(object);
    return object;
}

/* The plain call of attn.torch's fast paths on views q, k, v, out, its options built here:
 * no mask, causal when alignment is 1 (bottom-right) or 2 (top-left), scale (None:
 * 1/sqrt(Dk)), rows without keys as zeros. 1: it ran; 0: not such a call (the dtypes differ,
 * a size is 0, the batches differ or the scale is not a number that stays finite and nonzero
 * in float32: the caller takes the general path, which raises what it must, in its words);
 * -1: a Python error. */
static int run_plain(attn_tensor views[4], int alignment, PyObject *scaleo, int threads) {
    for (int n = 0; n < 4; ++n)
        for (int d = 0; d < 4; ++d)
            if (views[n].shape[d] == 0) return 0;
    for (int n = 1; n < 4; ++n)
        if (views[n].dtype != views[0].dtype || (n < 3 && views[n].shape[0] != views[0].shape[0]))
            return 0;
    attn_options options = attn_options_default();
    options.causal = alignment != 0;
    options.alignment = (attn_alignment)alignment;
    options.empty_rows = ATTN_EMPTY_ROWS_ZERO;
    if (scaleo != Py_None) {
        if (!PyFloat_Check(scaleo) && !(PyLong_Check(scaleo) && !PyBool_Check(scaleo))) return 0;
        const double scale = PyFloat_AsDouble(scaleo);
        if (PyErr_Occurred()) return -1;
        if (!(scale > 0.0) || !isfinite((float)scale) || (float)scale == 0.0f) return 0;
        options.custom_scale = 1;
        options.scale = (float)scale;
    }
    attn_execution execution = attn_execution_default();
    execution.num_threads = threads;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status;
    Py_BEGIN_ALLOW_THREADS
    status = attn_forward(&views[0], &views[1], &views[2], &options, &views[3], NULL, &execution,
                          &error);
    Py_END_ALLOW_THREADS
    if (status != ATTN_OK) {
        raise_status(status, &error);
        return -1;
    }
    return 1;
}

/* Whether a [B, H, T, D] view (described as attn's [B, T, H, D]) is C-contiguous. */
static int heads_first_contiguous(const attn_tensor *t) {
    return t->stride[3] == 1 && t->stride[1] == t->shape[3] &&
           t->stride[2] == t->shape[1] * t->shape[3] &&
           t->stride[0] == t->shape[2] * t->shape[1] * t->shape[3];
}

/* sdpa_torch(q, k, v, alignment, scale | None, enable_gqa, tokens_first, threads): the whole
 * fast path of a plain [B, H, T, D] call: reads q, k, v (torch_view), makes the output with
 * q.new_empty — [B, Hq, Tq, Dv] (torch's SDPA; q must then be contiguous), or [B, Tq, Hq, Dv]
 * with tokens_first (Hugging Face's attention functions) — and runs it (run_plain). Returns
 * the output, or None when the call is not such a one (then nothing was done). */
static PyObject *py_sdpa_torch(PyObject *self, PyObject *args) {
    PyObject *objects[3], *scaleo;
    int alignment, enable_gqa, tokens_first, threads;
    if (torch_tensor_type == NULL) Py_RETURN_NONE;
    if (!PyArg_ParseTuple(args, "OOOiOppi", &objects[0], &objects[1], &objects[2], &alignment,
                          &scaleo, &enable_gqa, &tokens_first, &threads))
        return NULL;
    attn_tensor views[4];
    for (int n = 0; n < 3; ++n) {
        const int found = torch_view(objects[n], 4, 1, &views[n]);
        if (found <= 0) return found < 0 ? NULL : new_reference(Py_None);
    }
    const int64_t B = views[0].shape[0], Tq = views[0].shape[1], Hq = views[0].shape[2],
                  Hkv = views[1].shape[2], Dv = views[2].shape[3];
    if ((Hkv != Hq && !(enable_gqa && Hkv > 0 && Hq % Hkv == 0)) ||
        (!tokens_first && !heads_first_contiguous(&views[0])))
        Py_RETURN_NONE;
    PyObject *shape = tokens_first ? Py_BuildValue("(LLLL)", (long long)B, (long long)Tq,
                                                   (long long)Hq, (long long)Dv)
                                   : Py_BuildValue("(LLLL)", (long long)B, (long long)Hq,
                                                   (long long)Tq, (long long)Dv);
    PyObject *out = shape ? PyObject_CallMethodObjArgs(objects[0], torch_names[NAME_NEW_EMPTY],
                                                       shape, NULL)
                          : NULL;
    Py_XDECREF(shape);
    if (out == NULL) return NULL;
    const int found = torch_view(out, 4, !tokens_first, &views[3]);
    const int ran = found <= 0 ? found : run_plain(views, alignment, scaleo, threads);
    if (ran > 0) return out;
    Py_DECREF(out);
    return ran < 0 ? NULL : new_reference(Py_None);
}

/* dropout_mask(options, keep): attn_dropout_mask */
static PyObject *py_dropout_mask(PyObject *self, PyObject *args) {
    PyObject *optionso, *keepo;
    if (!PyArg_ParseTuple(args, "OO", &optionso, &keepo)) return NULL;
    attn_tensor keep;
    option_tensors tensors;
    attn_options options;
    if (parse_options(optionso, &options, &tensors) || parse_tensor(keepo, &keep, "keep", 0) < 0)
        return NULL;
    attn_error error;
    memset(&error, 0, sizeof error);
    const attn_status status = attn_dropout_mask(&options, &keep, &error);
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

/* backward(q, k, v, out, lse, dout, options, dq, dk, dv, dbias | None, execution) */
static PyObject *py_backward(PyObject *self, PyObject *args) {
    PyObject *o[12];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &o[9], &o[10], &o[11]))
        return NULL;
    attn_tensor q, k, v, out, lse, dout, dq, dk, dv, dbias;
    option_tensors tensors;
    attn_options options;
    attn_execution execution;
    int has_dbias;
    if (parse_tensor(o[0], &q, "q", 0) < 0 || parse_tensor(o[1], &k, "k", 0) < 0 ||
        parse_tensor(o[2], &v, "v", 0) < 0 || parse_tensor(o[3], &out, "out", 0) < 0 ||
        parse_tensor(o[4], &lse, "lse", 0) < 0 || parse_tensor(o[5], &dout, "dout", 0) < 0 ||
        parse_options(o[6], &options, &tensors) || parse_tensor(o[7], &dq, "dq", 0) < 0 ||
        parse_tensor(o[8], &dk, "dk", 0) < 0 || parse_tensor(o[9], &dv, "dv", 0) < 0 ||
        (has_dbias = parse_tensor(o[10], &dbias, "dbias", 1)) < 0 ||
        parse_execution(o[11], &execution))
        return NULL;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status;
    Py_BEGIN_ALLOW_THREADS
    status = attn_backward(&q, &k, &v, &out, &lse, &dout, &options, &dq, &dk, &dv,
                           has_dbias ? &dbias : NULL, &execution, &error);
    Py_END_ALLOW_THREADS
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

/* sinks_backward(out, lse, dout, options, dsinks: float pointer) */
static PyObject *py_sinks_backward(PyObject *self, PyObject *args) {
    PyObject *o[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    attn_tensor out, lse, dout;
    option_tensors tensors;
    attn_options options;
    const void *dsinks;
    if (parse_tensor(o[0], &out, "out", 0) < 0 || parse_tensor(o[1], &lse, "lse", 0) < 0 ||
        parse_tensor(o[2], &dout, "dout", 0) < 0 || parse_options(o[3], &options, &tensors) ||
        parse_pointer(o[4], &dsinks))
        return NULL;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status;
    Py_BEGIN_ALLOW_THREADS
    status = attn_sinks_backward(&out, &lse, &dout, &options, (float *)dsinks, &error);
    Py_END_ALLOW_THREADS
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

#define MERGE_MAX_PARTS 4096

/* merge(outs: list of descriptors, lses: list of descriptors, out, lse) */
static PyObject *py_merge(PyObject *self, PyObject *args) {
    PyObject *outs_list, *lses_list, *outo, *lseo;
    if (!PyArg_ParseTuple(args, "OOOO", &outs_list, &lses_list, &outo, &lseo)) return NULL;
    if (!PyList_Check(outs_list) || !PyList_Check(lses_list) ||
        PyList_Size(outs_list) != PyList_Size(lses_list)) {
        PyErr_SetString(PyExc_TypeError, "merge: outs and lses must be lists of equal length");
        return NULL;
    }
    Py_ssize_t count = PyList_Size(outs_list);
    if (count < 1 || count > MERGE_MAX_PARTS) {
        PyErr_Format(PyExc_ValueError, "merge: number of partial results = %zd (1..%d)", count,
                     MERGE_MAX_PARTS);
        return NULL;
    }
    attn_tensor *views = PyMem_Malloc(sizeof(attn_tensor) * 2 * (size_t)count);
    const attn_tensor **pointers = PyMem_Malloc(sizeof(attn_tensor *) * 2 * (size_t)count);
    PyObject *result = NULL;
    attn_tensor out, lse;
    if (!views || !pointers) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t s = 0; s < count; ++s) {
        if (parse_tensor(PyList_GetItem(outs_list, s), &views[s], "outs[s]", 0) < 0 ||
            parse_tensor(PyList_GetItem(lses_list, s), &views[count + s], "lses[s]", 0) < 0)
            goto done;
        pointers[s] = &views[s];
        pointers[count + s] = &views[count + s];
    }
    if (parse_tensor(outo, &out, "out", 0) < 0 || parse_tensor(lseo, &lse, "lse", 0) < 0)
        goto done;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status;
    Py_BEGIN_ALLOW_THREADS
    status = attn_merge((int)count, pointers, pointers + count, &out, &lse, &error);
    Py_END_ALLOW_THREADS
    if (status != ATTN_OK) {
        raise_status(status, &error);
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(views);
    PyMem_Free((void *)pointers);
    return result;
}

/* ---- KV cache ------------------------------------------------------------------------------- */

static const char *CACHE_CAPSULE = "attn._attn.kv_cache";

static void cache_capsule_destroy(PyObject *capsule) {
    attn_kv_cache *cache = PyCapsule_GetPointer(capsule, CACHE_CAPSULE);
    if (cache) attn_kv_cache_destroy(cache);
    else PyErr_Clear();
}

static attn_kv_cache *get_cache(PyObject *capsule) {
    return PyCapsule_GetPointer(capsule, CACHE_CAPSULE);
}

/* cache_create(sequences, kv_heads, key_dim, value_dim, values_in_keys, dtype, capacity,
 *              page_size, page_count, rope_dim, rope_layout, rope_base) -> capsule */
static PyObject *py_cache_create(PyObject *self, PyObject *args) {
    attn_kv_cache_config config = attn_kv_cache_config_default();
    long long sequences, kv_heads, key_dim, value_dim, capacity, page_size, page_count, rope_dim;
    int values_in_keys, dtype, rope_layout;
    double rope_base;
    if (!PyArg_ParseTuple(args, "LLLLpiLLLLid", &sequences, &kv_heads, &key_dim, &value_dim,
                          &values_in_keys, &dtype, &capacity, &page_size, &page_count, &rope_dim,
                          &rope_layout, &rope_base))
        return NULL;
    config.sequences = sequences;
    config.kv_heads = kv_heads;
    config.key_dim = key_dim;
    config.value_dim = value_dim;
    config.values_in_keys = values_in_keys;
    config.dtype = (attn_dtype)dtype;
    config.capacity = capacity;
    config.page_size = page_size;
    config.page_count = page_count;
    config.rope_dim = rope_dim;
    config.rope_layout = (attn_rope_layout)rope_layout;
    config.rope_base = rope_base;
    attn_kv_cache *cache = NULL;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status;
    Py_BEGIN_ALLOW_THREADS
    status = attn_kv_cache_create(&config, &cache, &error);
    Py_END_ALLOW_THREADS
    if (status != ATTN_OK) return raise_status(status, &error);
    PyObject *capsule = PyCapsule_New(cache, CACHE_CAPSULE, cache_capsule_destroy);
    if (!capsule) attn_kv_cache_destroy(cache);
    return capsule;
}

/* cache_append(capsule, first_sequence, k, v | None) */
static PyObject *py_cache_append(PyObject *self, PyObject *args) {
    PyObject *capsule, *ko, *vo;
    long long first;
    if (!PyArg_ParseTuple(args, "OLOO", &capsule, &first, &ko, &vo)) return NULL;
    attn_kv_cache *cache = get_cache(capsule);
    attn_tensor k, v;
    int has_v;
    if (!cache || parse_tensor(ko, &k, "k", 0) < 0 || (has_v = parse_tensor(vo, &v, "v", 1)) < 0)
        return NULL;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status;
    Py_BEGIN_ALLOW_THREADS
    status = attn_kv_cache_append(cache, first, &k, has_v ? &v : NULL, &error);
    Py_END_ALLOW_THREADS
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

/* cache_read(capsule, sequence, first_token, k, v | None) */
static PyObject *py_cache_read(PyObject *self, PyObject *args) {
    PyObject *capsule, *ko, *vo;
    long long sequence, first;
    if (!PyArg_ParseTuple(args, "OLLOO", &capsule, &sequence, &first, &ko, &vo)) return NULL;
    attn_kv_cache *cache = get_cache(capsule);
    attn_tensor k, v;
    int has_v;
    if (!cache || parse_tensor(ko, &k, "k", 0) < 0 || (has_v = parse_tensor(vo, &v, "v", 1)) < 0)
        return NULL;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status = attn_kv_cache_read(cache, sequence, first, &k, has_v ? &v : NULL, &error);
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

/* cache_truncate(capsule, sequence, length) */
static PyObject *py_cache_truncate(PyObject *self, PyObject *args) {
    PyObject *capsule;
    long long sequence, length;
    if (!PyArg_ParseTuple(args, "OLL", &capsule, &sequence, &length)) return NULL;
    attn_kv_cache *cache = get_cache(capsule);
    if (!cache) return NULL;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status = attn_kv_cache_truncate(cache, sequence, length, &error);
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

/* cache_share_prefix(capsule, source, destination, length) */
static PyObject *py_cache_share_prefix(PyObject *self, PyObject *args) {
    PyObject *capsule;
    long long source, destination, length;
    if (!PyArg_ParseTuple(args, "OLLL", &capsule, &source, &destination, &length)) return NULL;
    attn_kv_cache *cache = get_cache(capsule);
    if (!cache) return NULL;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status = attn_kv_cache_share_prefix(cache, source, destination, length, &error);
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

/* cache_reset(capsule) */
static PyObject *py_cache_reset(PyObject *self, PyObject *capsule) {
    attn_kv_cache *cache = get_cache(capsule);
    if (!cache) return NULL;
    attn_kv_cache_reset(cache);
    Py_RETURN_NONE;
}

/* cache_length(capsule, sequence) -> int (-1 when out of range) */
static PyObject *py_cache_length(PyObject *self, PyObject *args) {
    PyObject *capsule;
    long long sequence;
    if (!PyArg_ParseTuple(args, "OL", &capsule, &sequence)) return NULL;
    attn_kv_cache *cache = get_cache(capsule);
    if (!cache) return NULL;
    return PyLong_FromLongLong(attn_kv_cache_length(cache, sequence));
}

/* cache_stats(capsule) -> (free_pages, footprint_bytes) */
static PyObject *py_cache_stats(PyObject *self, PyObject *capsule) {
    attn_kv_cache *cache = get_cache(capsule);
    if (!cache) return NULL;
    return Py_BuildValue("(LK)", (long long)attn_kv_cache_free_pages(cache),
                         (unsigned long long)attn_kv_cache_footprint_bytes(cache));
}

/* decode(capsule, q, out, lse | None, options, execution) */
static PyObject *py_decode(PyObject *self, PyObject *args) {
    PyObject *capsule, *qo, *outo, *lseo, *optionso, *executiono;
    if (!PyArg_ParseTuple(args, "OOOOOO", &capsule, &qo, &outo, &lseo, &optionso, &executiono))
        return NULL;
    attn_kv_cache *cache = get_cache(capsule);
    attn_tensor q, out, lse;
    option_tensors tensors;
    attn_options options;
    attn_execution execution;
    int has_lse;
    if (!cache || parse_tensor(qo, &q, "q", 0) < 0 || parse_tensor(outo, &out, "out", 0) < 0 ||
        (has_lse = parse_tensor(lseo, &lse, "lse", 1)) < 0 ||
        parse_options(optionso, &options, &tensors) || parse_execution(executiono, &execution))
        return NULL;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status;
    Py_BEGIN_ALLOW_THREADS
    status = attn_decode(cache, &q, &options, &out, has_lse ? &lse : NULL, &execution, &error);
    Py_END_ALLOW_THREADS
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

/* ---- serving: packed variable-length batches, caches the caller owns ----------------------- */

/* varlen_forward(q, k, v, cu_q: pointer, cu_k: pointer, B, max_q, max_k, out, lse | None,
 *                options, execution) */
static PyObject *py_varlen_forward(PyObject *self, PyObject *args) {
    PyObject *qo, *ko, *vo, *cuqo, *cuko, *outo, *lseo, *optionso, *executiono;
    long long batch, max_q, max_k;
    if (!PyArg_ParseTuple(args, "OOOOOLLLOOOO", &qo, &ko, &vo, &cuqo, &cuko, &batch, &max_q,
                          &max_k, &outo, &lseo, &optionso, &executiono))
        return NULL;
    attn_tensor q, k, v, out, lse;
    option_tensors tensors;
    attn_options options;
    attn_execution execution;
    const void *cu_q, *cu_k;
    int has_lse;
    if (parse_tensor(qo, &q, "q", 0) < 0 || parse_tensor(ko, &k, "k", 0) < 0 ||
        parse_tensor(vo, &v, "v", 0) < 0 || parse_pointer(cuqo, &cu_q) ||
        parse_pointer(cuko, &cu_k) || parse_tensor(outo, &out, "out", 0) < 0 ||
        (has_lse = parse_tensor(lseo, &lse, "lse", 1)) < 0 ||
        parse_options(optionso, &options, &tensors) || parse_execution(executiono, &execution))
        return NULL;
    const attn_varlen sequences = {(int64_t)batch, cu_q, cu_k, (int64_t)max_q, (int64_t)max_k};
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status;
    Py_BEGIN_ALLOW_THREADS
    status = attn_varlen_forward(&q, &k, &v, &sequences, &options, &out, has_lse ? &lse : NULL,
                                 &execution, &error);
    Py_END_ALLOW_THREADS
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

/* varlen_backward(q, k, v, out, lse, dout, cu_q, cu_k, B, max_q, max_k, dq, dk, dv, options,
 *                 execution) */
static PyObject *py_varlen_backward(PyObject *self, PyObject *args) {
    PyObject *o[6], *cuqo, *cuko, *g[3], *optionso, *executiono;
    long long batch, max_q, max_k;
    if (!PyArg_ParseTuple(args, "OOOOOOOOLLLOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &cuqo, &cuko, &batch, &max_q, &max_k, &g[0], &g[1], &g[2], &optionso,
                          &executiono))
        return NULL;
    attn_tensor q, k, v, out, lse, dout, dq, dk, dv;
    option_tensors tensors;
    attn_options options;
    attn_execution execution;
    const void *cu_q, *cu_k;
    if (parse_tensor(o[0], &q, "q", 0) < 0 || parse_tensor(o[1], &k, "k", 0) < 0 ||
        parse_tensor(o[2], &v, "v", 0) < 0 || parse_tensor(o[3], &out, "out", 0) < 0 ||
        parse_tensor(o[4], &lse, "lse", 0) < 0 || parse_tensor(o[5], &dout, "dout", 0) < 0 ||
        parse_pointer(cuqo, &cu_q) || parse_pointer(cuko, &cu_k) ||
        parse_tensor(g[0], &dq, "dq", 0) < 0 || parse_tensor(g[1], &dk, "dk", 0) < 0 ||
        parse_tensor(g[2], &dv, "dv", 0) < 0 || parse_options(optionso, &options, &tensors) ||
        parse_execution(executiono, &execution))
        return NULL;
    const attn_varlen sequences = {(int64_t)batch, cu_q, cu_k, (int64_t)max_q, (int64_t)max_k};
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status;
    Py_BEGIN_ALLOW_THREADS
    status = attn_varlen_backward(&q, &k, &v, &out, &lse, &dout, &sequences, &options, &dq, &dk,
                                  &dv, &execution, &error);
    Py_END_ALLOW_THREADS
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

/* forward_with_kvcache(q, k_cache, v_cache, block_table | None, cache_seqlens: pointer,
 *     k_new | None, v_new | None, rotary_cos | None, rotary_sin | None, rotary_layout: int,
 *     out, lse | None, options, execution, k_scale | None, v_scale | None) */
static PyObject *py_forward_with_kvcache(PyObject *self, PyObject *args) {
    PyObject *o[9], *outo, *lseo, *optionso, *executiono, *k_scaleo, *v_scaleo;
    int layout;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOiOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &layout, &outo, &lseo, &optionso, &executiono,
                          &k_scaleo, &v_scaleo))
        return NULL;
    attn_tensor q, k_cache, v_cache, table, k_new, v_new, cos_table, sin_table, out, lse;
    attn_tensor k_scale, v_scale;
    int has_k_scale, has_v_scale;
    option_tensors tensors;
    attn_options options;
    attn_execution execution;
    const void *seqlens;
    int has_table, has_k, has_v, has_cos, has_sin, has_lse;
    if (parse_tensor(o[0], &q, "q", 0) < 0 || parse_tensor(o[1], &k_cache, "k_cache", 0) < 0 ||
        parse_tensor(o[2], &v_cache, "v_cache", 0) < 0 ||
        (has_table = parse_tensor(o[3], &table, "block_table", 1)) < 0 ||
        parse_pointer(o[4], &seqlens) || (has_k = parse_tensor(o[5], &k_new, "k_new", 1)) < 0 ||
        (has_v = parse_tensor(o[6], &v_new, "v_new", 1)) < 0 ||
        (has_cos = parse_tensor(o[7], &cos_table, "rotary_cos", 1)) < 0 ||
        (has_sin = parse_tensor(o[8], &sin_table, "rotary_sin", 1)) < 0 ||
        parse_tensor(outo, &out, "out", 0) < 0 || (has_lse = parse_tensor(lseo, &lse, "lse", 1)) < 0 ||
        parse_options(optionso, &options, &tensors) || parse_execution(executiono, &execution) ||
        (has_k_scale = parse_tensor(k_scaleo, &k_scale, "k_scale", 1)) < 0 ||
        (has_v_scale = parse_tensor(v_scaleo, &v_scale, "v_scale", 1)) < 0)
        return NULL;
    const attn_kv_cache_view cache = {ATTN_KV_CACHE_VIEW_VERSION, &k_cache, &v_cache,
                                      has_table ? &table : NULL, seqlens,
                                      has_k_scale ? &k_scale : NULL, has_v_scale ? &v_scale : NULL};
    const attn_kv_append append = {has_k ? &k_new : NULL, has_v ? &v_new : NULL,
                                   has_cos ? &cos_table : NULL, has_sin ? &sin_table : NULL,
                                   (attn_rope_layout)layout};
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status;
    Py_BEGIN_ALLOW_THREADS
    status = attn_forward_with_kvcache(&q, &cache, &append, &options, &out, has_lse ? &lse : NULL,
                                       &execution, &error);
    Py_END_ALLOW_THREADS
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

/* ---- misc ----------------------------------------------------------------------------------- */

static PyObject *py_version(PyObject *self, PyObject *unused) {
    return PyUnicode_FromString(attn_version());
}

/* alibi_slopes(num_heads, slopes_pointer): fills float[num_heads]. */
static PyObject *py_alibi_slopes(PyObject *self, PyObject *args) {
    int heads;
    PyObject *pointer_object;
    if (!PyArg_ParseTuple(args, "iO", &heads, &pointer_object)) return NULL;
    const void *pointer;
    if (parse_pointer(pointer_object, &pointer)) return NULL;
    attn_error error;
    memset(&error, 0, sizeof error);
    attn_status status = attn_alibi_slopes(heads, (float *)pointer, &error);
    if (status != ATTN_OK) return raise_status(status, &error);
    Py_RETURN_NONE;
}

/* kernel_name(choice) -> the kernel family it selects here, or None when unavailable. */
static PyObject *py_kernel_name(PyObject *self, PyObject *args) {
    int choice;
    if (!PyArg_ParseTuple(args, "i", &choice)) return NULL;
    const char *name = attn_kernel_name((attn_kernel_choice)choice);
    if (!name) Py_RETURN_NONE;
    return PyUnicode_FromString(name);
}

static PyMethodDef methods[] = {
    {"kernel_name", py_kernel_name, METH_VARARGS, "attn_kernel_name (private)."},
    {"version", py_version, METH_NOARGS, "libattn's version, \"MAJOR.MINOR.PATCH\"."},
    {"forward", py_forward, METH_VARARGS, "attn_forward on descriptors (private)."},
    {"backward", py_backward, METH_VARARGS, "attn_backward on descriptors (private)."},
    {"merge", py_merge, METH_VARARGS, "attn_merge on descriptors (private)."},
    {"dropout_mask", py_dropout_mask, METH_VARARGS, "attn_dropout_mask (private)."},
    {"set_torch", py_set_torch, METH_VARARGS, "torch's Tensor type and dtypes (private)."},
    {"forward_torch", py_forward_torch, METH_VARARGS,
     "attn_forward on plain torch tensors (private)."},
    {"set_spinning_neighbours", py_set_spinning_neighbours, METH_VARARGS,
     "attn_set_spinning_neighbours (private)."},
    {"use_openmp", py_use_openmp, METH_VARARGS,
     "attn's parallel regions on an OpenMP runtime this process loaded (private)."},
    {"sdpa_torch", py_sdpa_torch, METH_VARARGS,
     "attn_forward of plain [B, H, T, D] torch tensors into a new output (private)."},
    {"sinks_backward", py_sinks_backward, METH_VARARGS,
     "attn_sinks_backward on descriptors (private)."},
    {"decode", py_decode, METH_VARARGS, "attn_decode on descriptors (private)."},
    {"varlen_forward", py_varlen_forward, METH_VARARGS, "attn_varlen_forward (private)."},
    {"varlen_backward", py_varlen_backward, METH_VARARGS, "attn_varlen_backward (private)."},
    {"forward_with_kvcache", py_forward_with_kvcache, METH_VARARGS,
     "attn_forward_with_kvcache (private)."},
    {"alibi_slopes", py_alibi_slopes, METH_VARARGS, "attn_alibi_slopes (private)."},
    {"cache_create", py_cache_create, METH_VARARGS, "attn_kv_cache_create (private)."},
    {"cache_append", py_cache_append, METH_VARARGS, "attn_kv_cache_append (private)."},
    {"cache_read", py_cache_read, METH_VARARGS, "attn_kv_cache_read (private)."},
    {"cache_truncate", py_cache_truncate, METH_VARARGS, "attn_kv_cache_truncate (private)."},
    {"cache_share_prefix", py_cache_share_prefix, METH_VARARGS,
     "attn_kv_cache_share_prefix (private)."},
    {"cache_reset", py_cache_reset, METH_O, "attn_kv_cache_reset (private)."},
    {"cache_length", py_cache_length, METH_VARARGS, "attn_kv_cache_length (private)."},
    {"cache_stats", py_cache_stats, METH_O, "(free pages, footprint bytes) (private)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_attn",
                                    "Private C layer of the attn package.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__attn(void) {
    return PyModule_Create(&module);
}
