// The translation unit of latmix_pch, the target that precompiles libtorch's headers for core's
// folders and the CLI (core/CMakeLists.txt). It compiles to nothing.
