#pragma once
// The device and dtype names of the command line and the workbench ("cpu", "cuda:1", "auto";
// "float32", "bfloat16") resolved, with errors that say what this machine and build offer.
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace latmix::model {

// Resolves "cpu", "cuda", "cuda:N" or "auto" (CUDA when available); throws with the choices.
c10::Device parseDevice(const std::string& name);
// The same name read without asking whether this machine has the device ("cuda" is cuda:0; "auto"
// is this machine's choice): for estimates of a run meant for another machine.
c10::Device deviceFromName(const std::string& name);
// The --device of local rank `localRank` of a data-parallel world, torchrun's convention: "cuda"
// -> cuda:<local rank>, "auto" -> cuda:<local rank> when CUDA is available, else cpu; a device
// with an index, or the CPU, as given (ranks may share one GPU).
std::string deviceOfLocalRank(const std::string& device, int localRank);
at::ScalarType parseDtype(const std::string& name); // "float32" | "bfloat16"

} // namespace latmix::model
