#pragma once
// What the open checkpoint is: its architecture and shape from config.json, size on disk and in
// memory, the tokenizer next to it, and the activation quantization points (SPEC §4) with their
// widths, one branch per layer. Shown in the main window's "Model" dock.
#include "model/Checkpoint.h"

#include <QMap>
#include <QString>
#include <QStringList>
#include <QWidget>

#include <memory>

class QFormLayout;
class QLabel;
class QStackedWidget;
class QTreeWidget;
class QTreeWidgetItem;

namespace latmix::gui {

class ModelSummaryView : public QWidget {
    Q_OBJECT

public:
    explicit ModelSummaryView(QWidget* parent = nullptr);

    // Shows checkpoint (kept alive here as long as it is shown); nullptr shows "No model open".
    // Reads the tokenizer from the checkpoint's folder to name its kind.
    void setCheckpoint(std::shared_ptr<const latmix::model::Checkpoint> checkpoint);
    std::shared_ptr<const latmix::model::Checkpoint> checkpoint() const { return m_checkpoint; }
    bool hasModel() const { return m_checkpoint != nullptr; }

    // The keys of the summary's rows, in display order: folder, architecture, layers, hidden,
    // heads, headDim, intermediate, vocab, parameters, dtype, weightBytes, memoryFloat32,
    // memoryBFloat16, tokenizer. Each value is a QLabel named "<key>Value".
    static QStringList fieldKeys();
    // The text a row shows (empty when no model is open or the key is unknown). The folder row
    // shows the full path, elided in the middle when the dock is narrower than it.
    QString fieldText(const QString& key) const;

    // Quantization points listed in the tree (4 per layer), read back from the tree itself.
    int pointCount() const;
    // The width the tree shows for a full point name ("layers.0.mlp.down_proj.input"); -1 if absent.
    int pointWidthShown(const QString& pointName) const;

    // Colours the points by a metric once it is known (the transform comparison's E(T)): a
    // fourth column with the value and a background from green (lowest) to red (highest) on a
    // log scale over the points that have a value. Values for the same metric name accumulate;
    // another name starts afresh. Cleared when another checkpoint is shown.
    void setPointMetric(const QString& metric, const QMap<QString, double>& values);
    // The format each point's linears get in the run the Calibration form describes ("mxfp4",
    // "mxfp8", "bf16"; run/FormatScheme's names), by full point name: the Format column. An empty
    // map empties it (no model, or a scheme that does not resolve).
    void setPointFormats(const QMap<QString, QString>& formats);
    QString pointFormatShown(const QString& pointName) const; // "" when none
    QString pointMetricName() const { return m_metricName; }
    double pointMetricShown(const QString& pointName) const; // NaN when the point has none

    // The device the memory rows are estimated for ("cpu", "cuda:0"; empty: libtorch's default).
    void setDevice(const QString& device);
    QString device() const { return m_device; }

    // "864.38 K", "12.91 M", "1.24 B": parameter counts as people quote them.
    static QString formatCount(qint64 n);

    // Makes the tree's item of pointName current (emits pointSelected); false when absent.
    bool selectPoint(const QString& pointName);

    // Each dense point's row has a child per linear that reads it, checkable "keep in bf16"
    // (--keep, SPEC §4 "Kept linears"). The checked ones by module name
    // ("model.layers.0.self_attn.q_proj"), in the tree's order; setKeptLinears checks exactly
    // these (unknown names are ignored) without emitting keptLinearsChanged.
    QStringList keptLinears() const;
    void setKeptLinears(const QStringList& modules);
    // The --keep regex that matches exactly these modules (empty for none).
    static QString keepRegex(const QStringList& modules);

signals:
    // A quantization point was picked in the tree ("layers.1.mlp.down_proj.input").
    void pointSelected(const QString& pointName);
    // A linear's "keep in bf16" box was toggled: every checked linear.
    void keptLinearsChanged(const QStringList& modules);

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void elideFolder();
    void addField(const QString& key, const QString& label, const QString& tip);
    void setField(const QString& key, const QString& text, const QString& tip = QString());
    void fillTree(const latmix::model::ModelConfig& config);
    void updateMemoryRows();
    QString tokenizerDescription(const QString& dir, QString* detail) const;

    std::shared_ptr<const latmix::model::Checkpoint> m_checkpoint;
    QStackedWidget* m_stack = nullptr;
    QLabel* m_title = nullptr;
    QFormLayout* m_form = nullptr;
    QTreeWidget* m_tree = nullptr;
    QLabel* m_folderValue = nullptr;
    QString m_folderPath; // native separators; shown elided in the middle to fit the dock
    QString m_device;
    QString m_metricName;
    QMap<QString, double> m_metric;
    QMap<QString, QString> m_formats; // setPointFormats
    void setHeader();
    QTreeWidgetItem* pointItem(const QString& pointName) const;
};

} // namespace latmix::gui
