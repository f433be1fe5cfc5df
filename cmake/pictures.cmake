# pictures.cmake — cairo and pango (through pkg-config) for the attn tool's
# pictures: heat maps and the benchmark plot (cli/figure.c, cli/heatmap.c, cli/bench_plot.c),
# PNG and SVG.
# Only the command-line tool links them; the library stays free of them.
find_package(PkgConfig REQUIRED)
pkg_check_modules(ATTN_PICTURES REQUIRED IMPORTED_TARGET cairo pangocairo)
target_link_libraries(attn_cli PRIVATE PkgConfig::ATTN_PICTURES)
