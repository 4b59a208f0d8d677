#pragma once
// Plots of a transform analysis (issue: per-layer transform comparison): per-block error vs
// block index and E(T) vs block size, one curve per transform, rendered with QCustomPlot.
// Used by the workbench views and, offscreen, to write the PNGs of docs/research/analysis.md.
#include <QString>
#include <QVector>

class QCustomPlot;

namespace latmix::gui {

struct TransformCurves {
    QString transform;
    QVector<double> perBlockError;              // E_B^i, i = 0..N_B-1
    QVector<double> sweepBlocks, sweepMse;      // E(T) at each block size
};

struct PointCurves {
    QString point;  // e.g. "layers.2.mlp.down_proj.input"
    QString format; // e.g. "mxfp4, block 32"
    QVector<TransformCurves> transforms;
};

namespace AnalysisPlots {

// Fill an existing plot (clears it first). Log-scale y: errors span orders of magnitude.
void drawPerBlockError(QCustomPlot* plot, const PointCurves& curves);
void drawBlockSizeSweep(QCustomPlot* plot, const PointCurves& curves);

// Render offscreen to PNG files of the given size; false (with error set) when writing fails.
bool savePerBlockErrorPng(const PointCurves& curves, const QString& file, QString* error = nullptr,
                          int width = 1000, int height = 520);
bool saveBlockSizeSweepPng(const PointCurves& curves, const QString& file, QString* error = nullptr,
                           int width = 1000, int height = 520);

// Reads the analysis JSON that `latmix analyze --json` writes. Throws std::runtime_error naming
// the file and the missing field.
QVector<PointCurves> loadAnalysisJson(const QString& file);

} // namespace AnalysisPlots

} // namespace latmix::gui
