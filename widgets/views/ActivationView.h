#pragma once
// The activation tab: what the MX quantizer sees at one quantization point of the open model.
// The point's activations are captured on calibration windows (cached per model, point,
// windows and length, so changing the transform, token or format does not capture again) and
// core's metrics::profileActivations measures them before and after a chosen fixed transform
// (or, for an open run, profileActivationPair against the point captured from the run's model):
// per-channel max |x| over tokens (log scale, the largest channels labelled: the "massive
// activations"), per-token norm, a histogram of the values, and one token's MX blocks (its
// values, their MX fake-quantization, each block's shared scale exponent and error). The view
// draws core's numbers unchanged; capture and analysis run on a worker thread (AnalysisView).
#include "AnalysisView.h"
#include "FormWidgets.h"
#include "metrics/ActivationProfile.h"

#include <ATen/core/Tensor.h>

#include <QMap>
#include <QPair>
#include <QString>
#include <QStringList>

#include <memory>

class QComboBox;
class QCustomPlot;
class QLabel;
class QPushButton;
class QSpinBox;

namespace latmix::gui {

class ActivationView : public AnalysisView {
    Q_OBJECT

public:
    explicit ActivationView(QWidget* parent = nullptr);

    void setModelDir(const QString& dir); // fills the point list; empty disables
    QString modelDir() const { return m_modelDir; }

    bool selectPoint(const QString& point);
    QString currentPoint() const;
    bool setTransform(const QString& kind); // one of transformKinds(), or runTransformName() once a run is set
    QString transform() const;
    static QStringList transformKinds();   // none, hadamard, block-hadamard, orthogonal, block-orthogonal
    // A finished run of the open model (a folder with transforms.h5): its transforms become a
    // choice, shown as what that run's quantizers see, i.e. the point captured from the model
    // with the run's T1/T2/T3 folded in (fold::foldedModel), against the original model's.
    // A folder without transforms.h5 (RTN, GPTQ) removes the choice; so does an empty one.
    void setRun(const QString& runDir);
    QString runDir() const { return m_runDir; }
    static QString runTransformName() { return QStringLiteral("run's model"); }
    void setFormat(const QString& format);
    void setCalibration(int windows, int seqLen);
    void setToken(int token);
    int windows() const;
    int seqLen() const;
    int token() const;

    // Captures (or takes from the cache) the current point's activations and profiles them on
    // the worker thread; false and *error when it cannot start (no model, a job running, bad
    // settings). profileFinished follows.
    bool analyze(QString* error = nullptr);

    // The last profile, as core returned it, and the activations it was computed on.
    const latmix::metrics::ActivationProfile& lastProfile() const { return m_profile; }
    at::Tensor lastActivations() const { return m_activations; }
    int cachedCaptures() const { return m_cache.size(); }

    // The MX blocks the blocks plot shows at first: four around the token's worst.
    QPair<int, int> blocksShown() const { return m_blocksShown; }

signals:
    void profileFinished(bool ok, const QString& message);

private:
    QString cacheKey() const;
    void showProfile();
    void drawChannelMaxima();
    void drawTokenNorms();
    void drawHistograms();
    void drawTokenBlocks();
    void showSummary();

    QString m_modelDir;
    QString m_runDir; // the run whose transforms are a choice; empty: none
    QMap<QString, at::Tensor> m_cache; // capture key -> activations [rows, d]
    QStringList m_cacheOrder;          // oldest first, for eviction
    latmix::metrics::ActivationProfile m_profile;
    QString m_profilePoint; // the point and the tokens captured (windows × length) of m_profile
    int m_profileTokens = 0;
    at::Tensor m_activations;
    QPair<int, int> m_blocksShown{0, 0}; // first and last MX block in the blocks plot's range
    FormWidgets::PointPicker m_point;
    QComboBox* m_transform;
    QComboBox* m_format;
    QSpinBox* m_windows;
    QSpinBox* m_seqLen;
    QSpinBox* m_token;
    QPushButton* m_analyze;
    QLabel* m_summary;
    QCustomPlot* m_channelPlot;
    QCustomPlot* m_tokenNormPlot;
    QCustomPlot* m_histogramPlot;
    QCustomPlot* m_blocksPlot;
};

} // namespace latmix::gui
