#pragma once
// A one-line label that shows as much of its text as fits, elided (in the middle by default:
// run folders and paths keep their start and their end), the whole text as its tooltip. It
// never widens its layout: long run names and paths stay out of the window's minimum width.
#include <QComboBox>
#include <QLabel>
#include <QString>

namespace latmix::gui {

class ElidedLabel : public QLabel {
    Q_OBJECT

public:
    explicit ElidedLabel(QWidget* parent = nullptr, Qt::TextElideMode mode = Qt::ElideMiddle);
    void setFullText(const QString& text);
    QString fullText() const { return m_full; }
    QSize minimumSizeHint() const override;

protected:
    void resizeEvent(QResizeEvent* event) override;
    void changeEvent(QEvent* event) override;

private:
    void refit();
    QString m_full;
    Qt::TextElideMode m_mode;
};

// A combo box whose current text, when it does not fit, is elided in the middle
// ("layers.7.ml…down_proj.input": the layer and the point's kind stay), its tooltip the whole
// text, its list as wide as its longest item (issue 71: point names were cut at the right).
class ElidedComboBox : public QComboBox {
    Q_OBJECT

public:
    explicit ElidedComboBox(QWidget* parent = nullptr);
    void showPopup() override;

protected:
    void paintEvent(QPaintEvent* event) override;
};

} // namespace latmix::gui
