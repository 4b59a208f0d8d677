#pragma once
// What a user would see wrong in the window at its current size, tab by tab, as sentences
// naming the view and the widget (empty: nothing): the window's minimum larger than its size or
// a dock closed (the Model and Jobs docks are meant to stay open from 1024x700 up); a name cut
// in a table's first column, a table hiding columns behind a sideways scroll bar at 1280 px and
// wider; an elided label that does not fit or lost its tool tip; a form wider than its scroll
// area; on every plot, axis labels out of the palette's colour, an axis with fewer than two
// labels or overlapping ones, a cut legend entry, peak names overlapping or leaving the plot, a
// legend covering points. Geometry is read back from Qt and QCustomPlot after the layouts settle.
// tst_plotlayout runs it offscreen at several sizes; `latmix-workbench --layout-report FILE`
// writes it from a real X window (packaging/gui-x-check.sh).
#include <QStringList>

namespace latmix::gui {

class MainWindow;

// Shows each tab in turn (the current one again at the end) and lets its layout settle.
QStringList layoutProblems(MainWindow& window);

} // namespace latmix::gui
