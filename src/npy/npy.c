/*
 * npy.c — NumPy .npy files: a strict reader (format 1.0, 2.0 and 3.0) and an atomic writer
 * (format 1.0).
 *
 * File layout (numpy.lib.format):
 *   "\x93NUMPY" | major | minor | header length (uint16 LE for 1.0, uint32 LE for 2.0/3.0)
 *   | header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 *     padded with spaces and ending in '\n' | the raw little-endian data in C order.
 *
 * The reader never trusts the file: every length is checked against the bytes actually
 * present, size products are overflow-checked, the header is parsed with a bounded cursor,
 * and only the dtypes, ranks and byte orders attn understands are accepted. The file reader
 * reads the data straight into the array's allocation (no second copy of the data).
 */
#define _POSIX_C_SOURCE 200809L

#include "core/internal.h"
#include "attn_io.h"
#include "core/regular_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LENGTH 6
/* Headers longer than this are refused: numpy itself refuses above 10,000 bytes by default. */
#define NPY_MAX_HEADER_LENGTH ((size_t)1 << 20)

/* ---- dtypes ------------------------------------------------------------------------- */

/* The descr strings we read and write. One-byte types carry '|' (no byte order), as numpy
 * writes them; wider types carry '<' (little-endian). */
typedef struct npy_descr {
    const char *text;
    attn_dtype dtype;
} npy_descr;

static const npy_descr npy_descrs[] = {
    {"<f4", ATTN_DTYPE_F32}, {"<f8", ATTN_DTYPE_F64}, {"|b1", ATTN_DTYPE_BOOL},
    {"|u1", ATTN_DTYPE_BOOL}, {"<i4", ATTN_DTYPE_I32}, {"<i8", ATTN_DTYPE_I64},
    {"<f2", ATTN_DTYPE_F16},
};

/* The descr written for `dtype`, or NULL if .npy has none (bfloat16). */
static const char *npy_descr_for(attn_dtype dtype) {
    for (size_t i = 0; i < sizeof npy_descrs / sizeof npy_descrs[0]; ++i)
        if (npy_descrs[i].dtype == dtype) return npy_descrs[i].text;
    return NULL;
}

/* ---- header parsing ------------------------------------------------------------------ */

/* What the header says about the array. */
typedef struct npy_header {
    attn_dtype dtype;
    int rank;
    int64_t shape[ATTN_MAX_RANK];
    size_t data_offset; /* bytes before the data */
    size_t byte_count;  /* bytes of data the shape and dtype call for */
} npy_header;

/* A bounded cursor over the header text: reads never pass `end`. */
typedef struct cursor {
    const char *position;
    const char *end;
} cursor;

static void skip_spaces(cursor *c) {
    while (c->position < c->end && (*c->position == ' ' || *c->position == '\t'))
        ++c->position;
}

/* Consumes `ch` (after optional spaces); false if the next character is something else. */
static bool accept_char(cursor *c, char ch) {
    skip_spaces(c);
    if (c->position < c->end && *c->position == ch) {
        ++c->position;
        return true;
    }
    return false;
}

/* Consumes the word `word` exactly (True, False). */
static bool accept_word(cursor *c, const char *word) {
    skip_spaces(c);
    size_t length = strlen(word);
    if ((size_t)(c->end - c->position) >= length && memcmp(c->position, word, length) == 0) {
        c->position += length;
        return true;
    }
    return false;
}

/* Reads a quoted string ('...' or "...", no escapes) into `out` (capacity >= 2). */
static bool read_string(cursor *c, char *out, size_t capacity) {
    skip_spaces(c);
    if (c->position >= c->end || (*c->position != '\'' && *c->position != '"')) return false;
    char quote = *c->position++;
    size_t length = 0;
    while (c->position < c->end && *c->position != quote) {
        if (*c->position == '\\' || *c->position == '\n' || length + 1 >= capacity) return false;
        out[length++] = *c->position++;
    }
    if (c->position >= c->end) return false;
    ++c->position; /* closing quote */
    out[length] = '\0';
    return true;
}

/* Reads a non-negative decimal integer; false if absent. Sets *overflow when it does not fit
 * in int64 (the digits are still consumed). */
static bool read_dimension(cursor *c, int64_t *value, bool *overflow) {
    skip_spaces(c);
    if (c->position >= c->end || *c->position < '0' || *c->position > '9') return false;
    int64_t result = 0;
    while (c->position < c->end && *c->position >= '0' && *c->position <= '9') {
        int digit = *c->position++ - '0';
        if (!attn_mul_i64(result, 10, &result) || !attn_add_i64(result, digit, &result)) {
            *overflow = true;
            result = 0;
        }
    }
    *value = result;
    return true;
}

/* Parses the shape tuple: "()", "(n,)", "(n, m)", "(n, m,)"... A one-element tuple needs its
 * comma, as in Python. Counts dimensions beyond ATTN_MAX_RANK without storing them. */
static attn_status parse_shape(cursor *c, const char *name, npy_header *header, attn_error *error) {
    if (!accept_char(c, '('))
        return attn_fail(error, ATTN_ERROR_FORMAT, "%s: malformed header: 'shape' is not a tuple",
                         name);
    int count = 0;
    bool overflow = false, trailing_comma = false;
    for (;;) {
        if (accept_char(c, ')')) break;
        if (count > 0 && !trailing_comma)
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "%s: malformed header: expected ',' or ')' in 'shape'", name);
        int64_t dimension;
        if (!read_dimension(c, &dimension, &overflow))
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "%s: malformed header: 'shape' entry %d is not a non-negative integer",
                             name, count);
        if (count < ATTN_MAX_RANK) header->shape[count] = dimension;
        if (count < 1000) ++count;
        trailing_comma = accept_char(c, ',');
    }
    if (count == 1 && !trailing_comma)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "%s: malformed header: 'shape' (n) lacks the comma of a 1-tuple", name);
    if (count > ATTN_MAX_RANK)
        return attn_fail(error, ATTN_ERROR_FORMAT, "%s: rank %d%s: attn reads rank 0..%d", name,
                         count, count >= 1000 ? "+" : "", ATTN_MAX_RANK);
    if (overflow)
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "%s: a 'shape' entry does not fit in int64",
                         name);
    header->rank = count;
    return ATTN_OK;
}

/* Maps a descr string to a dtype, with a message that says why it is refused otherwise. */
static attn_status parse_descr(const char *descr, const char *name, npy_header *header,
                               attn_error *error) {
    for (size_t i = 0; i < sizeof npy_descrs / sizeof npy_descrs[0]; ++i)
        if (strcmp(descr, npy_descrs[i].text) == 0) {
            header->dtype = npy_descrs[i].dtype;
            return ATTN_OK;
        }
    if (descr[0] == '>')
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "%s: dtype '%s' is big-endian: write it little-endian (astype('<%s'))",
                         name, descr, descr + 1);
    return attn_fail(error, ATTN_ERROR_FORMAT,
                     "%s: dtype '%s' is not supported (use <f4, <f8, <f2, <i4, <i8, |b1 or |u1)",
                     name, descr);
}

/* Parses the header dict text[0, length): exactly the keys descr, fortran_order and shape,
 * each once, in any order, then only padding (spaces, a final newline). */
static attn_status parse_header_dict(const char *text, size_t length, const char *name,
                                     npy_header *header, attn_error *error) {
    cursor c = {text, text + length};
    bool have_descr = false, have_fortran = false, have_shape = false;
    if (!accept_char(&c, '{'))
        return attn_fail(error, ATTN_ERROR_FORMAT, "%s: malformed header: does not start with '{'",
                         name);
    for (;;) {
        if (accept_char(&c, '}')) break;
        char key[32];
        if (!read_string(&c, key, sizeof key) || !accept_char(&c, ':'))
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "%s: malformed header: expected 'key': value in the dict", name);
        if (strcmp(key, "descr") == 0 && !have_descr) {
            char descr[32];
            if (!read_string(&c, descr, sizeof descr))
                return attn_fail(error, ATTN_ERROR_FORMAT,
                                 "%s: malformed header: 'descr' is not a simple dtype string", name);
            attn_status status = parse_descr(descr, name, header, error);
            if (status != ATTN_OK) return status;
            have_descr = true;
        } else if (strcmp(key, "fortran_order") == 0 && !have_fortran) {
            if (accept_word(&c, "True"))
                return attn_fail(error, ATTN_ERROR_FORMAT,
                                 "%s: fortran_order = True: write a C-order array "
                                 "(np.ascontiguousarray)", name);
            if (!accept_word(&c, "False"))
                return attn_fail(error, ATTN_ERROR_FORMAT,
                                 "%s: malformed header: 'fortran_order' is not True or False", name);
            have_fortran = true;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            attn_status status = parse_shape(&c, name, header, error);
            if (status != ATTN_OK) return status;
            have_shape = true;
        } else {
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "%s: malformed header: unexpected or repeated key '%s'", name, key);
        }
        if (!accept_char(&c, ',')) {
            if (accept_char(&c, '}')) break;
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "%s: malformed header: expected ',' or '}' after '%s'", name, key);
        }
    }
    if (!have_descr || !have_fortran || !have_shape)
        return attn_fail(error, ATTN_ERROR_FORMAT, "%s: malformed header: missing key '%s'", name,
                         !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
    for (const char *p = c.position; p < c.end; ++p)
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t')
            return attn_fail(error, ATTN_ERROR_FORMAT,
                             "%s: malformed header: unexpected text after the dict", name);
    return ATTN_OK;
}

/* Reads the fixed preamble (magic, version, header length) from the first bytes of a file.
 * Sets *preamble_length (10 or 12) and *header_length. `available` bytes are readable. */
static attn_status parse_preamble(const unsigned char *bytes, size_t available, const char *name,
                                  size_t *preamble_length, size_t *header_length,
                                  attn_error *error) {
    if (available < NPY_MAGIC_LENGTH + 2)
        return attn_fail(error, ATTN_ERROR_IO, "%s: truncated: %zu bytes, too short for a .npy "
                         "preamble", name, available);
    if (memcmp(bytes, NPY_MAGIC, NPY_MAGIC_LENGTH) != 0)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "%s: not a .npy file (the magic string \\x93NUMPY is missing)", name);
    unsigned major = bytes[6], minor = bytes[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "%s: .npy format version %u.%u is not supported (1.0, 2.0, 3.0)", name,
                         major, minor);
    *preamble_length = major == 1 ? 10 : 12;
    if (available < *preamble_length)
        return attn_fail(error, ATTN_ERROR_IO, "%s: truncated: the header length is cut off",
                         name);
    if (major == 1)
        *header_length = (size_t)bytes[8] | (size_t)bytes[9] << 8;
    else
        *header_length = (size_t)bytes[8] | (size_t)bytes[9] << 8 | (size_t)bytes[10] << 16 |
                         (size_t)bytes[11] << 24;
    if (*header_length > NPY_MAX_HEADER_LENGTH)
        return attn_fail(error, ATTN_ERROR_FORMAT, "%s: header length %zu exceeds %zu bytes", name,
                         *header_length, NPY_MAX_HEADER_LENGTH);
    return ATTN_OK;
}

/* Computes header->byte_count from dtype and shape, with overflow and memory-limit checks. */
static attn_status compute_byte_count(npy_header *header, size_t memory_limit_bytes,
                                      const char *name, attn_error *error) {
    int64_t elements = 1;
    for (int d = 0; d < header->rank; ++d)
        if (!attn_mul_i64(elements, header->shape[d], &elements))
            return attn_fail(error, ATTN_ERROR_OVERFLOW,
                             "%s: the element count of the shape overflows int64 (dim %d = %lld)",
                             name, d, (long long)header->shape[d]);
    int64_t bytes;
    if (!attn_mul_i64(elements, (int64_t)attn_dtype_size(header->dtype), &bytes) ||
        (uint64_t)bytes > (uint64_t)(SIZE_MAX / 2))
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "%s: %lld elements of %s overflow the size "
                         "range", name, (long long)elements, attn_dtype_name(header->dtype));
    header->byte_count = (size_t)bytes;
    if (memory_limit_bytes > 0 && header->byte_count > memory_limit_bytes)
        return attn_fail(error, ATTN_ERROR_MEMORY_LIMIT,
                         "%s: data of %zu bytes exceeds the memory limit of %zu bytes", name,
                         header->byte_count, memory_limit_bytes);
    return ATTN_OK;
}

/* Checks that exactly `byte_count` data bytes follow the header. */
static attn_status check_data_length(const npy_header *header, size_t data_available,
                                     const char *name, attn_error *error) {
    if (data_available < header->byte_count)
        return attn_fail(error, ATTN_ERROR_IO,
                         "%s: truncated data: %zu bytes present, the shape needs %zu", name,
                         data_available, header->byte_count);
    if (data_available > header->byte_count)
        return attn_fail(error, ATTN_ERROR_FORMAT,
                         "%s: %zu unexpected bytes after the data (shape needs %zu bytes)", name,
                         data_available - header->byte_count, header->byte_count);
    return ATTN_OK;
}

/* Allocates the data of an array described by `header` (at least one byte, so an empty
 * array still has a non-NULL pointer) and fills the array's description. */
static attn_status allocate_array(const npy_header *header, const char *name,
                                  attn_npy_array *array, attn_error *error) {
    void *data = attn_aligned_alloc(header->byte_count > 0 ? header->byte_count : 1);
    if (data == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes", name,
                         header->byte_count);
    memset(array, 0, sizeof *array);
    array->dtype = header->dtype;
    array->rank = header->rank;
    for (int d = 0; d < header->rank; ++d) array->shape[d] = header->shape[d];
    array->data = data;
    array->byte_count = header->byte_count;
    return ATTN_OK;
}

/* ---- reading --------------------------------------------------------------------------- */

attn_status attn_npy_parse(const void *bytes, size_t byte_count, size_t memory_limit_bytes,
                           attn_npy_array *array, attn_error *error) {
    const char *name = "npy image";
    if (array == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "array is NULL");
    memset(array, 0, sizeof *array);
    if (bytes == NULL && byte_count > 0)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "bytes is NULL");
    const unsigned char *image = bytes;
    size_t preamble_length = 0, header_length = 0;
    attn_status status =
        parse_preamble(image, byte_count, name, &preamble_length, &header_length, error);
    if (status != ATTN_OK) return status;
    if (byte_count - preamble_length < header_length)
        return attn_fail(error, ATTN_ERROR_IO, "%s: truncated header: %zu of %zu bytes present",
                         name, byte_count - preamble_length, header_length);
    npy_header header;
    memset(&header, 0, sizeof header);
    status = parse_header_dict((const char *)image + preamble_length, header_length, name, &header,
                               error);
    if (status == ATTN_OK) status = compute_byte_count(&header, memory_limit_bytes, name, error);
    header.data_offset = preamble_length + header_length;
    if (status == ATTN_OK)
        status = check_data_length(&header, byte_count - header.data_offset, name, error);
    if (status == ATTN_OK) status = allocate_array(&header, name, array, error);
    if (status != ATTN_OK) return status;
    if (header.byte_count > 0) memcpy(array->data, image + header.data_offset, header.byte_count);
    return ATTN_OK;
}

/* Reads exactly `count` bytes; false on a short read. */
static bool read_exactly(FILE *file, void *buffer, size_t count) {
    return count == 0 || fread(buffer, 1, count, file) == count;
}

attn_status attn_npy_read(const char *path, size_t memory_limit_bytes, attn_npy_array *array,
                          attn_error *error) {
    if (array == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "array is NULL");
    memset(array, 0, sizeof *array);
    if (path == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "path is NULL");
    /* Opened without blocking and refused unless regular: a FIFO with no writer would hold
     * the open forever, and a device such as /dev/zero has no size to check the header by. */
    struct stat info;
    const int descriptor = attn_io_open(path, &info, error);
    if (descriptor < 0) return ATTN_ERROR_IO;
    attn_status status = attn_io_require_regular(descriptor, &info, path, error);
    if (status != ATTN_OK) return status;
    FILE *file = fdopen(descriptor, "rb");
    if (file == NULL) {
        const int code = errno;
        close(descriptor);
        return attn_fail(error, ATTN_ERROR_IO, "%s: cannot open: %s", path, strerror(code));
    }
    char *header_text = NULL;
    size_t file_size = (size_t)info.st_size;

    unsigned char preamble[12];
    size_t preamble_available = file_size < sizeof preamble ? file_size : sizeof preamble;
    if (!read_exactly(file, preamble, preamble_available)) {
        status = attn_fail(error, ATTN_ERROR_IO, "%s: read error in the preamble", path);
        goto done;
    }
    size_t preamble_length = 0, header_length = 0;
    status = parse_preamble(preamble, preamble_available, path, &preamble_length, &header_length,
                            error);
    if (status != ATTN_OK) goto done;
    if (file_size - preamble_length < header_length) {
        status = attn_fail(error, ATTN_ERROR_IO, "%s: truncated header: %zu of %zu bytes present",
                           path, file_size - preamble_length, header_length);
        goto done;
    }
    header_text = malloc(header_length > 0 ? header_length : 1);
    if (header_text == NULL) {
        status = attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: cannot allocate the header", path);
        goto done;
    }
    if (fseek(file, (long)preamble_length, SEEK_SET) != 0 ||
        !read_exactly(file, header_text, header_length)) {
        status = attn_fail(error, ATTN_ERROR_IO, "%s: read error in the header", path);
        goto done;
    }
    npy_header header;
    memset(&header, 0, sizeof header);
    status = parse_header_dict(header_text, header_length, path, &header, error);
    if (status == ATTN_OK) status = compute_byte_count(&header, memory_limit_bytes, path, error);
    header.data_offset = preamble_length + header_length;
    if (status == ATTN_OK)
        status = check_data_length(&header, file_size - header.data_offset, path, error);
    if (status == ATTN_OK) status = allocate_array(&header, path, array, error);
    if (status != ATTN_OK) goto done;
    if (!read_exactly(file, array->data, header.byte_count)) {
        attn_npy_free(array);
        status = attn_fail(error, ATTN_ERROR_IO, "%s: truncated data (short read)", path);
    }
done:
    free(header_text);
    fclose(file);
    return status;
}

void attn_npy_free(attn_npy_array *array) {
    if (array == NULL) return;
    attn_aligned_free(array->data);
    memset(array, 0, sizeof *array);
}

/* ---- writing --------------------------------------------------------------------------- */

/* Formats the 1.0 preamble and header for (descr, shape) into `out`: the total length is a
 * multiple of 64 and the header ends in '\n'. Returns the length, or 0 if it does not fit. */
static size_t format_header(const char *descr, int rank, const int64_t *shape, char *out,
                            size_t capacity) {
    char dict[256];
    int length = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                          descr);
    for (int d = 0; d < rank; ++d)
        length += snprintf(dict + length, sizeof dict - (size_t)length, "%s%lld",
                           d > 0 ? ", " : "", (long long)shape[d]);
    length += snprintf(dict + length, sizeof dict - (size_t)length, "%s), }",
                       rank == 1 ? "," : "");
    size_t unpadded = 10 + (size_t)length + 1; /* preamble + dict + '\n' */
    size_t total = (unpadded + 63) / 64 * 64;
    if (total > capacity || total - 10 > 65535) return 0;
    memcpy(out, NPY_MAGIC, NPY_MAGIC_LENGTH);
    out[6] = 1;
    out[7] = 0;
    size_t header_length = total - 10;
    out[8] = (char)(header_length & 0xff);
    out[9] = (char)(header_length >> 8);
    memcpy(out + 10, dict, (size_t)length);
    memset(out + 10 + length, ' ', total - 10 - (size_t)length - 1);
    out[total - 1] = '\n';
    return total;
}

attn_status attn_npy_write(const char *path, attn_dtype dtype, int rank, const int64_t *shape,
                           const void *data, attn_error *error) {
    if (path == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "path is NULL");
    if (rank < 0 || rank > ATTN_MAX_RANK)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "%s: rank = %d: must be 0..%d", path,
                         rank, ATTN_MAX_RANK);
    if (rank > 0 && shape == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "%s: shape is NULL", path);
    const char *descr = npy_descr_for(dtype);
    if (descr == NULL)
        return attn_fail(error, ATTN_ERROR_UNSUPPORTED, "%s: dtype %s has no .npy equivalent",
                         path, attn_dtype_name(dtype));
    npy_header header;
    memset(&header, 0, sizeof header);
    header.dtype = dtype;
    header.rank = rank;
    for (int d = 0; d < rank; ++d) {
        if (shape[d] < 0)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "%s: shape[%d] = %lld: must be >= 0",
                             path, d, (long long)shape[d]);
        header.shape[d] = shape[d];
    }
    attn_status status = compute_byte_count(&header, 0, path, error);
    if (status != ATTN_OK) return status;
    if (data == NULL && header.byte_count > 0)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "%s: data is NULL", path);

    char preamble[320];
    size_t preamble_length = format_header(descr, rank, shape, preamble, sizeof preamble);
    if (preamble_length == 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "%s: header too long", path);

    /* Write "path.tmp-XXXXXX" in the same directory, then rename over `path`. */
    size_t path_length = strlen(path);
    char *temporary = malloc(path_length + 12);
    if (temporary == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: cannot allocate a file name", path);
    memcpy(temporary, path, path_length);
    memcpy(temporary + path_length, ".tmp-XXXXXX", 12);
    int descriptor = mkstemp(temporary);
    if (descriptor < 0) {
        status = attn_fail(error, ATTN_ERROR_IO, "%s: cannot create a temporary file: %s", path,
                           strerror(errno));
        free(temporary);
        return status;
    }
    fchmod(descriptor, 0644);
    FILE *file = fdopen(descriptor, "wb");
    if (file == NULL) {
        status = attn_fail(error, ATTN_ERROR_IO, "%s: cannot open the temporary file: %s", path,
                           strerror(errno));
        close(descriptor);
    } else {
        bool written = fwrite(preamble, 1, preamble_length, file) == preamble_length &&
                       (header.byte_count == 0 ||
                        fwrite(data, 1, header.byte_count, file) == header.byte_count);
        int write_errno = errno;
        bool closed = fclose(file) == 0;
        if (!written || !closed)
            status = attn_fail(error, ATTN_ERROR_IO, "%s: write failed: %s", path,
                               strerror(written ? errno : write_errno));
        else if (rename(temporary, path) != 0)
            status = attn_fail(error, ATTN_ERROR_IO, "%s: cannot rename the temporary file into "
                               "place: %s", path, strerror(errno));
    }
    if (status != ATTN_OK) unlink(temporary);
    free(temporary);
    return status;
}
