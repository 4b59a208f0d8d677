#pragma once
// A copy of a model folder with one weight value replaced (NaN, +Inf, -Inf): the damaged
// checkpoint of the bad-input tests. Include after ATen (Qt's `slots` macro breaks ATen headers).
#include "io/SafeTensors.h"

#include <ATen/ATen.h>

#include <QDir>
#include <QFile>
#include <QString>

#include <string>
#include <utility>
#include <vector>

namespace latmix::test {

// dst gets src's files, its model.safetensors rewritten with tensor's value at flatIndex (row-major)
// set to value. False when src has no such tensor or the index is outside it.
inline bool writePoisonedModel(const QString& src, const QString& dst, const std::string& tensor, std::int64_t flatIndex,
                               double value) {
    QDir().mkpath(dst);
    for (const QString& f : QDir(src).entryList(QDir::Files))
        if (f != QLatin1String("model.safetensors")) QFile::copy(src + "/" + f, dst + "/" + f);
    const auto file = io::SafeTensorsFile::open((src + "/model.safetensors").toStdString());
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    bool done = false;
    for (const auto& e : file->entries()) {
        at::Tensor w = file->tensor(e.name);
        if (e.name == tensor && flatIndex >= 0 && flatIndex < w.numel()) {
            w = w.clone();
            w.view({-1})[flatIndex].fill_(value);
            done = true;
        }
        tensors.emplace_back(e.name, w);
    }
    io::writeSafeTensors((dst + "/model.safetensors").toStdString(), tensors, {{"format", "pt"}});
    return done;
}

} // namespace latmix::test
