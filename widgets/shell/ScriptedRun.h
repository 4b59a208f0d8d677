#pragma once
// What latmix-workbench does from its command line besides showing the window: provision the
// built-in demo model, render `latmix analyze --json` plots, and drive the window through a
// scripted session (open a run, pick a view, show a point's activations, compare transforms at
// a point, calibrate) ending
// in a screenshot. Here rather than in app/gui/main.cpp so tests run the same flows in process
// (main only parses the command line).
#include <QSize>
#include <QString>

namespace latmix::gui {

class MainWindow;

// The built-in demo model's folder under the per-user data folder (AppLocalDataLocation:
// ~/.local/share/LATMiX/Workbench/demo-model on Linux; under $XDG_DATA_HOME where
// that is set, as the tests set it), written there when it is missing or incomplete. writeDemoModel is deterministic and
// takes milliseconds, so a half-written folder is simply written again. Empty and *error set
// when no folder is writable or the write fails.
QString prepareDemoModel(QString* error);

// One PNG of per-block error and one of E(T) vs block size per quantization point of a
// `latmix analyze --json` file, into outDir ("<point>-per-block.png", "<point>-sweep.png").
// Returns the files written; false and *error on a bad file or an unwritable folder.
bool plotAnalysisJson(const QString& json, const QString& outDir, QStringList* written, QString* error);

struct ScriptedSession {
    QString openRun;        // a finished run folder to open (its curves, its export)
    QString view;           // explorer, activations, weights, experts, diagram, comparison, sensitivity, calibration or runs; empty: unchanged
    QString point;          // select this quantization point in every view (before view is shown)
    QString comparePoint;   // compare the transforms at this point, then across layers
    QStringList compareTransforms; // the transforms ticked for it (empty: the view's defaults)
    QString acrossLayers = QStringLiteral("none"); // transform of the map across layers, or "off"
    QString activationPoint; // show the activations of this point (the activation view)
    QString activationTransform = QStringLiteral("hadamard"); // ... before and after this transform ("run": openRun's)
    QString weightsLinear;   // show the weights of this linear ("layers.1.mlp.down_proj"; the weights view,
                             // folded with openRun's transforms when it has them)
    int expertWindows = 0;   // measure the expert load on this many windows (the experts view); 0: no, -1: a bad value
    QString sensitivityTable; // a table latmix sensitivity wrote, shown in the sensitivity view
    QString runsFolder;      // list the runs of this folder in the runs view, the best four selected
    QString scheme;          // the Calibration form's Mixed precision rules (before calibrateMethod starts)
    QString calibrateMethod; // start a calibration with this method
    int steps = 40;          // its training steps
    QString screenshot;      // PNG written at the end, after the comparison / calibration finished
    QString layoutReport;    // LayoutCheck.h's problems written here at the very end (the window stays up)
    QSize size{1280, 800};   // the window's size for the screenshot, the report and the waits
};

// Runs the session on window, waiting (in a local event loop) for the activations, the
// comparison and, when a
// screenshot is asked for, the calibration. A job that fails is reported on stderr and the
// session goes on (the screenshot then shows the error); a bad argument (unknown view or point,
// steps < 1, unwritable screenshot) stops it: false and *error.
bool runScriptedSession(MainWindow& window, const ScriptedSession& session, QString* error);

} // namespace latmix::gui
