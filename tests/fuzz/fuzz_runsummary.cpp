// latmix.json, read by run::readRunSummary (the runs table, `latmix runs`, the report).
#include "FuzzSupport.h"

#include "run/RunCatalog.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace latmix;
    const std::string path = fuzz::writeInput("latmix.json", data, size);
    fuzz::expectResultOrClearError(path, [&] { (void)run::readRunSummary(fuzz::scratchDir().string()); });
    return 0;
}
