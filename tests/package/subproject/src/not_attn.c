/* not_attn.c — a file of the parent project in tests/package/subproject, not part of attn:
 * if attn's build ever globbed the top-level source tree (CMAKE_SOURCE_DIR) instead of its
 * own, this file would be compiled into libattn and stop the build. */
#error "attn compiled a source file of its parent project"
