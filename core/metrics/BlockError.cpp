#include "metrics/BlockError.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace latmix::metrics {

at::Tensor perBlockError(const at::Tensor& x, const at::Tensor& xq, int blockSize) {
    if (!x.sizes().equals(xq.sizes())) throw std::invalid_argument("perBlockError: shapes differ");
    if (blockSize < 1) throw std::invalid_argument("perBlockError: block size must be positive");
    const int64_t n = x.size(-1), nb = (n + blockSize - 1) / blockSize;
    auto d2 = (x.to(at::kDouble) - xq.to(at::kDouble)).pow(2).reshape({-1, n}).mean(0);
    if (nb * blockSize != n) d2 = at::constant_pad_nd(d2, {0, nb * blockSize - n}, 0);
    auto sums = d2.reshape({nb, blockSize}).sum(1);
    auto lengths = at::full({nb}, static_cast<double>(blockSize), sums.options());
    lengths[nb - 1] = static_cast<double>(n - (nb - 1) * blockSize); // trailing partial block
    return sums / lengths;
}

ErrorSummary errorSummary(const at::Tensor& x, const at::Tensor& xq) {
    if (!x.sizes().equals(xq.sizes())) throw std::invalid_argument("errorSummary: shapes differ");
    const at::Tensor xd = x.to(at::kDouble), diff = xd - xq.to(at::kDouble);
    const double noise = diff.pow(2).sum().item<double>(), signal = xd.pow(2).sum().item<double>();
    ErrorSummary e;
    e.mse = x.numel() > 0 ? noise / static_cast<double>(x.numel()) : 0.0;
    if (signal <= 0) e.sqnrDb = std::numeric_limits<double>::quiet_NaN();
    else if (noise <= 0) e.sqnrDb = std::numeric_limits<double>::infinity();
    else e.sqnrDb = 10.0 * std::log10(signal / noise);
    return e;
}

} // namespace latmix::metrics
