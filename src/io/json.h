/*
 * json.h — the library's one way into cJSON (Debian's libcjson): parsing a JSON text of a
 * given length into a cJSON tree with an attn_status and a message naming the source and
 * the byte where parsing stopped. Used by the safetensors reader (headers, index files) and
 * by config.json readers. Internal to libattn.
 *
 * cJSON records its last error in a process-wide variable on every parse; attn never reads
 * it, but two threads parsing at once would race on it, so parses are serialised by a mutex.
 */
#ifndef ATTN_IO_JSON_H
#define ATTN_IO_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "attn.h"
#include "attn_io.h"

/*
 * Parses text[0, length) (need not be NUL-terminated) as one JSON value followed only by
 * JSON whitespace. `what` names the source in messages ("model.safetensors header").
 * On success *root receives the tree (free with cJSON_Delete). Errors: ATTN_ERROR_FORMAT
 * ("WHAT: malformed JSON at byte N" / "trailing bytes after the JSON value at byte N"),
 * ATTN_ERROR_OUT_OF_MEMORY. On error *root is NULL.
 */
attn_status attn_json_parse(const char *text, size_t length, const char *what, cJSON **root,
                            attn_error *error);

/* The member `key` of object `object`, or NULL (exact, case-sensitive match; the first one
 * when a key repeats). */
const cJSON *attn_json_member(const cJSON *object, const char *key);

/*
 * item as a non-negative integer <= 2^53 (the doubles cJSON stores represent those exactly).
 * Returns 0 when item is not a number of that kind.
 */
int attn_json_count(const cJSON *item, uint64_t *value);

#endif /* ATTN_IO_JSON_H */
