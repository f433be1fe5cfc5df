/* PLACEHOLDER-UNBUILT: the engine helper replaces this with the portable kernel table. */
#include "../kernel.h"
const attn_kernel_table attn_kernels_generic = {"generic", 64, 64, 0, 0, 0, 0, 0, 0, 0, 0};
