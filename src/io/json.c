/*
 * json.c — parsing JSON through cJSON with attn's errors (see json.h). cJSON is handed a
 * NUL-terminated copy of the text so that nothing depends on how it treats the length
 * argument at the end of the buffer.
 */
#include "io/json.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

static pthread_mutex_t json_parse_lock = PTHREAD_MUTEX_INITIALIZER;

attn_status attn_json_parse(const char *text, size_t length, const char *what, cJSON **root,
                            attn_error *error) {
    if (root == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "root = NULL");
    *root = NULL;
    if (text == NULL && length > 0)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "%s: text = NULL", what);
    if (length == SIZE_MAX)
        return attn_fail(error, ATTN_ERROR_OVERFLOW, "%s: %zu bytes", what, length);
    char *copy = malloc(length + 1);
    if (copy == NULL)
        return attn_fail(error, ATTN_ERROR_OUT_OF_MEMORY, "%s: cannot copy %zu bytes of JSON",
                         what, length);
    if (length > 0) memcpy(copy, text, length);
    copy[length] = '\0';
    const char *end = NULL;
    pthread_mutex_lock(&json_parse_lock);
    cJSON *tree = cJSON_ParseWithLengthOpts(copy, length + 1, &end, 0);
    pthread_mutex_unlock(&json_parse_lock);
    size_t stop = end != NULL && end >= copy && end <= copy + length ? (size_t)(end - copy)
                                                                      : length;
    attn_status status = ATTN_OK;
    if (tree == NULL) {
        status = attn_fail(error, ATTN_ERROR_FORMAT, "%s: malformed JSON at byte %zu", what,
                           stop);
    } else {
        size_t at = stop;
        while (at < length && (copy[at] == ' ' || copy[at] == '\t' || copy[at] == '\n' ||
                               copy[at] == '\r'))
            ++at;
        if (at != length) {
            status = attn_fail(error, ATTN_ERROR_FORMAT,
                               "%s: trailing bytes after the JSON value at byte %zu", what, at);
            cJSON_Delete(tree);
            tree = NULL;
        }
    }
    free(copy);
    *root = tree;
    return status;
}

const cJSON *attn_json_member(const cJSON *object, const char *key) {
    if (object == NULL || !cJSON_IsObject(object) || key == NULL) return NULL;
    for (const cJSON *child = object->child; child != NULL; child = child->next)
        if (child->string != NULL && strcmp(child->string, key) == 0) return child;
    return NULL;
}

int attn_json_count(const cJSON *item, uint64_t *value) {
    if (item == NULL || !cJSON_IsNumber(item)) return 0;
    double v = item->valuedouble;
    if (!(v >= 0.0) || v > 9007199254740992.0 || v != (double)(uint64_t)v) return 0;
    *value = (uint64_t)v;
    return 1;
}
