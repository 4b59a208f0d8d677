#include "train/AdamW.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>

namespace latmix::train {

AdamW::AdamW(std::vector<at::Tensor> p, double wd) : params(std::move(p)), weightDecay(wd) {
    for (auto& x : params) {
        m.push_back(at::zeros_like(x).detach());
        v.push_back(at::zeros_like(x).detach());
    }
}

void AdamW::step(double lr) {
    at::NoGradGuard noGrad;
    ++t;
    const double c1 = 1 - std::pow(beta1, double(t)), c2 = 1 - std::pow(beta2, double(t));
    for (size_t i = 0; i < params.size(); ++i) {
        auto& p = params[i];
        if (!p.grad().defined()) continue;
        const at::Tensor g = p.grad();
        if (weightDecay != 0) p.mul_(1 - lr * weightDecay); // decoupled: before the Adam update
        m[i].mul_(beta1).add_(g, 1 - beta1);
        v[i].mul_(beta2).addcmul_(g, g, 1 - beta2);
        const at::Tensor denom = (v[i] / c2).sqrt_().add_(eps);
        p.addcdiv_(m[i], denom, -lr / c1);
    }
}

void AdamW::zeroGrad() {
    for (auto& p : params)
        if (p.grad().defined()) p.mutable_grad() = at::Tensor();
}

} // namespace latmix::train
