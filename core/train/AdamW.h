#pragma once
// AdamW as PyTorch defines it (decoupled weight decay, bias-corrected moments, eps outside the
// root), for the distillation's transform parameters. Written out instead of
// torch::optim::AdamW so that its state (m, v, t) can be saved, restored and broadcast with the
// same code on libtorch 1.13 and 2.x (the optimizer-state API differs between them);
// tst_adamw checks it against torch::optim::AdamW.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace latmix::train {

struct AdamW {
    std::vector<at::Tensor> params, m, v;
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
    std::int64_t t = 0; // steps taken

    AdamW(std::vector<at::Tensor> params, double weightDecay);
    // One step at learning rate lr over the parameters that have a gradient (the others are left
    // as they are). One step count for all parameters, where PyTorch counts per parameter: the
    // same whenever every parameter has a gradient at every step, as in the distillation.
    void step(double lr);
    // Drops the gradients (the next backward starts from none).
    void zeroGrad();
};

} // namespace latmix::train
