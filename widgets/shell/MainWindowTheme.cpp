// MainWindow's themes (View › Theme): the platform's, a light and a dark Fusion palette,
// remembered in the settings.
#include "MainWindow.h"

#include "WorkbenchSettings.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QPalette>
#include <QSettings>
#include <QStyle>

namespace latmix::gui {
namespace {

const char* const kThemeKey = "view/theme";

QString themeName(MainWindow::Theme t) {
    switch (t) {
    case MainWindow::Theme::Light: return QStringLiteral("light");
    case MainWindow::Theme::Dark: return QStringLiteral("dark");
    default: return QStringLiteral("system");
    }
}

MainWindow::Theme parseTheme(const QString& s) {
    if (s == QLatin1String("light")) return MainWindow::Theme::Light;
    if (s == QLatin1String("dark")) return MainWindow::Theme::Dark;
    return MainWindow::Theme::System;
}

// The style the platform chose, remembered before the first theme switch so "System" can
// return to it.
QString systemStyleName() {
    static const QString name = QApplication::style() ? QApplication::style()->name() : QString();
    return name;
}

QPalette darkPalette() {
    QPalette p;
    const QColor window(0x2b, 0x2d, 0x31), base(0x1e, 0x1f, 0x22), text(0xe6, 0xe6, 0xe6);
    const QColor disabled(0x80, 0x80, 0x80), highlight(0x3d, 0x7e, 0xd6);
    p.setColor(QPalette::Window, window);
    p.setColor(QPalette::WindowText, text);
    p.setColor(QPalette::Base, base);
    p.setColor(QPalette::AlternateBase, window);
    p.setColor(QPalette::ToolTipBase, base);
    p.setColor(QPalette::ToolTipText, text);
    p.setColor(QPalette::PlaceholderText, disabled);
    p.setColor(QPalette::Text, text);
    p.setColor(QPalette::Button, window);
    p.setColor(QPalette::ButtonText, text);
    p.setColor(QPalette::BrightText, Qt::red);
    p.setColor(QPalette::Link, highlight.lighter(130));
    p.setColor(QPalette::Highlight, highlight);
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::Light, window.lighter(150));
    p.setColor(QPalette::Midlight, window.lighter(125));
    p.setColor(QPalette::Mid, window.darker(120));
    p.setColor(QPalette::Dark, window.darker(150));
    p.setColor(QPalette::Shadow, Qt::black);
    for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText, QPalette::HighlightedText})
        p.setColor(QPalette::Disabled, role, disabled);
    return p;
}

} // namespace

void MainWindow::restoreTheme() {
    systemStyleName(); // remember the platform style before any theme is applied
    setTheme(parseTheme(workbenchSettings().value(QLatin1String(kThemeKey)).toString()));
}

void MainWindow::setTheme(Theme theme) {
    m_theme = theme;
    // Switching styles repolishes every widget; skip it when the style would not change.
    auto useStyle = [](const QString& name) {
        if (!name.isEmpty() && QApplication::style()->name().compare(name, Qt::CaseInsensitive) != 0)
            QApplication::setStyle(name);
    };
    switch (theme) {
    case Theme::System:
        useStyle(systemStyleName());
        // An empty palette (no resolved roles) resets the application palette to the
        // platform's, which keeps following the desktop's light/dark setting.
        QApplication::setPalette(QPalette());
        break;
    case Theme::Light:
        // Fusion draws the same on every platform and honours the palette fully.
        useStyle(QStringLiteral("Fusion"));
        QApplication::setPalette(QApplication::style()->standardPalette());
        break;
    case Theme::Dark:
        useStyle(QStringLiteral("Fusion"));
        QApplication::setPalette(darkPalette());
        break;
    }
    for (QAction* a : m_themeGroup->actions())
        if (a->data().toInt() == static_cast<int>(theme)) a->setChecked(true);
    workbenchSettings().setValue(QLatin1String(kThemeKey), themeName(theme));
}

} // namespace latmix::gui
