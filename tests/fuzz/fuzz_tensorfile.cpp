// HDF5 tensor files (transforms.h5, train.h5) through io::readStoredTensors, the read path of
// io::readTensorFile. Every dataset it hands out must fit the memory asked for: the buffers are
// exactly numel * itemSize bytes, so ASan reports any read past them. libhdf5 itself is not
// instrumented (Debian's build); what it does wrong on a crafted file shows as a crash here.
#include "FuzzSupport.h"

#include "io/StoredTensors.h"

#include <memory>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace latmix;
    const std::string path = fuzz::writeInput("run.h5", data, size);
    std::vector<std::unique_ptr<unsigned char[]>> buffers;
    fuzz::expectResultOrClearError(path, [&] {
        io::readStoredTensors(path, [&](const io::StoredTensor& t) -> void* {
            // No file of `size` bytes stores more than `size` bytes of data.
            if (t.numel * t.itemSize() > 8 * (size + 64)) fuzz::finding("'" + t.name + "' asks for more than the file holds");
            buffers.emplace_back(new unsigned char[t.numel * t.itemSize() + 1]);
            return buffers.back().get();
        });
    });
    return 0;
}
