#pragma once
// ATen for a widgets file, the one way widgets/ include it: Qt's `slots` keyword macro, defined
// by any Qt header read before (the file's own, or another file's in the same unity batch),
// breaks libtorch's headers (torch/csrc/jit/api/object.h has a slots() method), so the macro is
// hidden while ATen is read and restored after. QCustomPlot and Qt's own headers keep their
// keywords; core's headers include ATen/core/Tensor.h only, which is safe next to them.
#pragma push_macro("slots")
#undef slots
#include <ATen/ATen.h>
#pragma pop_macro("slots")
