// Activation run files (`latmix capture --out run.h5`) through io::StoredActivations, the read path
// of io::ActivationReader (`latmix analyze --activations`). Every point's rows and the tokens are
// read into buffers of exactly the size the reader declared, so ASan reports any write past them.
// libhdf5 itself is not instrumented (Debian's build); what it does wrong on a crafted file shows
// as a crash here. Like the tensor files, these are sealed: most mutations end at the CRC check.
#include "FuzzSupport.h"

#include "io/StoredActivations.h"

#include <memory>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace latmix;
    const std::string path = fuzz::writeInput("activations.h5", data, size);
    fuzz::expectResultOrClearError(path, [&] {
        const io::StoredActivations file(path);
        // No file of `size` bytes stores more than `size` bytes of data.
        const auto fits = [&](std::uint64_t bytes, const std::string& what) {
            if (bytes > 8 * (size + 64)) fuzz::finding("'" + what + "' asks for more than the file holds");
        };
        for (const auto& p : file.points()) {
            const std::uint64_t bytes = p.rows * p.width * (p.bfloat16 ? 2 : 4);
            fits(bytes, p.name);
            std::unique_ptr<unsigned char[]> buffer(new unsigned char[bytes + 1]);
            file.readRows(p.name, p.rows, buffer.get());
        }
        if (file.hasTokens()) {
            fits(file.tokenRows() * file.tokenColumns() * 4, "/tokens");
            std::vector<std::int32_t> tokens(file.tokenRows() * file.tokenColumns());
            file.readTokens(tokens.data());
        }
        try {
            file.point("no/such/point"); // an HDF5 member name never holds a slash
            fuzz::finding("a point that is not in the file was found");
        } catch (const std::runtime_error&) {
        }
    });
    return 0;
}
