// Default options of the sanitizer runtimes, for builds configured with LATMIX_SANITIZE (the
// `sanitize` preset, CMakePresets.json). core/CMakeLists.txt compiles this file into every
// executable of such a build (an INTERFACE source of latmix_core), never into a normal build. The
// runtimes call these functions before main; ASAN_OPTIONS / UBSAN_OPTIONS / LSAN_OPTIONS in the
// environment still override them.

extern "C" {

// allocator_may_return_null=1: an allocation that cannot be served returns null (operator new
// throws std::bad_alloc), as it does without ASan. Out-of-memory handling is part of what the
// tests check (tst_outofmemory: a clear message that names the size and the way out); ASan's
// default would abort the process instead.
//
// alloc_dealloc_mismatch=0: libsentencepiece is loaded with RTLD_DEEPBIND
// (tokenizer/SentencePieceTokenizer.cpp), so its references to operator new bind to libstdc++'s
// while those to operator delete bind to the runtime's; ASan then sees its own objects freed by
// the "wrong" function on every load (new vs free, malloc vs delete). Those pairs are consistent
// for the library, so the check is switched off; heap overflows, use-after-free and double frees
// are still reported. Without DEEPBIND the library would bind to libtorch's libprotobuf 3.21
// instead of its own copy of 3.14 and abort while loading.
//
// detect_stack_use_after_return stays off (the default): libtorch's OpenMP workers run
// uninstrumented and it only slows the runs.
const char* __asan_default_options() { return "allocator_may_return_null=1:alloc_dealloc_mismatch=0"; }

// Every UB report with a stack, so that a failure in a test names its caller. The build adds
// -fno-sanitize-recover=all: the first report ends the process and fails the test.
const char* __ubsan_default_options() { return "print_stacktrace=1"; }

} // extern "C"
