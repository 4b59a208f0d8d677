// Core headers first: they pull in ATen/core/Tensor.h only, which is safe next to Qt's keywords.
#include "model/QuantizationPoints.h"

#include "BlockDiagramLayout.h"

#include <QCoreApplication>
#include <QFontMetricsF>
#include <QSizeF>
#include <QVector>
#include <QWidget>

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <utility>

namespace latmix::gui {

using model::PointKind;
using Role = BlockDiagramScene::Role;
using Fill = BlockDiagramScene::Fill;
using Info = BlockDiagramInfo;

QFont blockDiagramFont(QFont f, double pt, Role role) {
    f.setPointSizeF(role == Role::Title || role == Role::Badge ? pt : role == Role::Sub ? pt * 0.86 : pt * 0.74);
    f.setBold(role != Role::Sub);
    return f;
}

namespace {

QString tr(const char* s) { return QCoreApplication::translate("BlockDiagramView", s); }

// "self_attn.qkv.input" of core's "layers.3.self_attn.qkv.input": the layer is in the frame title.
QString markerText(const QString& pointName) {
    const int first = pointName.indexOf(QLatin1Char('.'));
    const int second = first < 0 ? -1 : pointName.indexOf(QLatin1Char('.'), first + 1);
    return second < 0 ? pointName : pointName.mid(second + 1);
}

QString transformTip(int t, int t3Block) {
    if (t == 0)
        return tr("<p><b>T1 = (A1, v1)</b>, d_model × d_model, one for the whole model: <b>folded (free at "
                  "inference)</b>.</p><p>The residual stream carries A1·x + v1 from the embedding on: the embedding "
                  "rows become A1·w + v1; the linears that read the stream (q, k, v, gate, up, lm_head) get W·A1⁻¹ "
                  "and bias b − W·A1⁻¹·v1; those that write it (o_proj, down_proj) get A1·W and bias A1·b. Nothing "
                  "is applied to activations by hand.</p><p>RMSNorm runs on the transformed stream: exact for an "
                  "orthogonal A1, approximate otherwise (what the distillation trains for).</p>");
    if (t == 1)
        return tr("<p><b>T2 = (A2, v2)</b>, head_dim × head_dim, one per layer shared by all heads: <b>folded (free "
                  "at inference)</b>.</p><p>Every value head becomes V·A2 + v2, folded into the rows of W_v of each "
                  "kv head; o_proj's input columns of every attention head get A2⁻¹ and o_proj a bias "
                  "−W_o·blockdiag(A2⁻¹)·v2. Exact, because each softmax row sums to 1.</p>");
    return tr("<p><b>T3</b>: block Hadamard H (block %1) on the down_proj input: <b>online</b>, computed at "
              "inference (a fast Walsh–Hadamard transform per block) before the activation is quantized.</p>"
              "<p>Its inverse Hᵀ is folded into W_down's columns.</p>")
        .arg(t3Block);
}

QString pointRole(PointKind kind) {
    switch (kind) {
    case PointKind::QkvInput: return tr("the input RMSNorm's output, shared by q_proj, k_proj and v_proj");
    case PointKind::OProjInput: return tr("the attention output (heads × head_dim, T2 applied) entering o_proj");
    case PointKind::GateUpInput: return tr("the post-attention RMSNorm's output, shared by gate_proj and up_proj");
    case PointKind::DownProjInput: return tr("SiLU(gate) ⊙ up after the online T3, entering down_proj");
    }
    return {};
}

const QString kWeightTip = QStringLiteral("<p><b>W: MX</b>: the weights of every linear of the block are quantized "
                                          "(MX groups along the input dimension, RTN or GPTQ), with the folded "
                                          "transforms already in them. With a model open the tag names the format "
                                          "the Calibration form gives the linear (its Mixed precision rule's, or the "
                                          "Format; W: BF16 kept).</p>");

// Lays the diagram out for one title point size and gap scale; `fits` says whether it fits the canvas.
class Layouter {
public:
    Layouter(const QWidget* w, const Info& info, double pt, double gap)
        : m_info(info), m_g(gap), m_fm{QFontMetricsF(blockDiagramFont(w->font(), pt, Role::Title), w),
                                       QFontMetricsF(blockDiagramFont(w->font(), pt, Role::Sub), w),
                                       QFontMetricsF(blockDiagramFont(w->font(), pt, Role::Tag), w),
                                       QFontMetricsF(blockDiagramFont(w->font(), pt, Role::Badge), w)} {
        m_s.pt = pt;
        m_s.gap = gap;
        u = m_s.unit = m_fm[0].height();
        m_padX = 0.55 * u;
        m_padY = 0.25 * u;
        m_bw = adv(Role::Badge, QStringLiteral("T2")) + 0.7 * u;
        m_bh = h(Role::Badge) + 0.2 * u;
        // One tag width for every box: the widest of the formats shown.
        m_tagW = adv(Role::Tag, weightTag()) + 0.5 * u;
        for (const QString& f : m_info.formats)
            if (!f.isEmpty()) m_tagW = std::max(m_tagW, adv(Role::Tag, QStringLiteral("W: ") + f.toUpper()) + 0.5 * u);
        m_tagH = h(Role::Tag) + 0.1 * u;
        m_m = 0.9 * u;
    }
    BlockDiagramScene build(const QRectF& canvas);

private:
    struct Spec {
        QString module, title;
        QStringList subs;
        Fill fill;
        QString tip;
    };
    static QString weightTag() { return QStringLiteral("W: MX"); }
    // A linear's tag: its format when the form's scheme is known ("W: MXFP8", "W: BF16").
    QString weightTag(const QString& module) const {
        const QString f = m_info.formats[int(kindOf(module))];
        return f.isEmpty() ? weightTag() : QStringLiteral("W: ") + f.toUpper();
    }
    static PointKind kindOf(const QString& module) {
        if (module == QLatin1String("o_proj")) return PointKind::OProjInput;
        if (module == QLatin1String("gate_proj") || module == QLatin1String("up_proj")) return PointKind::GateUpInput;
        if (module == QLatin1String("down_proj")) return PointKind::DownProjInput;
        return PointKind::QkvInput;
    }
    double adv(Role r, const QString& t) const { return std::ceil(m_fm[int(r)].horizontalAdvance(t)) + 1; }
    double h(Role r) const { return m_fm[int(r)].height(); }
    Spec spec(const QString& module) const;
    QSizeF measure(const Spec& s) const;
    QRectF place(const Spec& s, double cx, double top, double w, double hgt);
    QRectF text(const QString& t, Role r, double x, double cy, bool centred = false);
    void badge(int t, const QPointF& c);
    void marker(PointKind kind, double x, double y);
    void arrow(std::initializer_list<QPointF> pts) { m_s.arrows.push_back(QPolygonF(QVector<QPointF>(pts))); }
    void line(std::initializer_list<QPointF> pts) { m_s.lines.push_back(QPolygonF(QVector<QPointF>(pts))); }
    double legend(double top);
    // Where build put the stream, the spines and the boxes, for connect.
    struct Joints {
        double xe, xl, ys, r, xRetA, xRetM; // the stream: embedding and lm_head columns, its height, the adds
        double ax, mx, row1, bar;           // the attention and MLP spines, the norms' row, the fork bar
        double qx, vx, gx, ux, row2, h2;    // the projections' columns, their row and height
        double band, bandH, row3, row4;     // the QK-norm band, the attention / act row, the o / down row
        QRectF eR, inR, postR, attR, actR, oR, dR;
    };
    void connect(const Joints& j);

    Info m_info;
    double m_g, u = 0, m_padX = 0, m_padY = 0, m_bw = 0, m_bh = 0, m_tagW = 0, m_tagH = 0, m_m = 0;
    std::array<QFontMetricsF, 4> m_fm;
    BlockDiagramScene m_s;
};

Layouter::Spec Layouter::spec(const QString& module) const {
    const Info& i = m_info;
    const QString in = QStringLiteral("W A1⁻¹");
    const QString qkvFold = in + (i.qkvBias ? tr(" + bias") : QString());
    const QString mlpFold = in + (i.mlpBias ? tr(" + bias") : QString());
    const QString kvHeads = !i.hasModel                 ? tr("kv heads (GQA)")
                            : i.kvHeads < i.heads ? tr("%1 kv heads (GQA)").arg(i.kvHeads)
                                                        : tr("%1 heads").arg(i.kvHeads);
    const QString linearTip = tr("<p><b>%1</b>: weights quantized (MX).</p><p>%2</p>");
    const QString readsStream = tr("T1 folded into its input: W·A1⁻¹ (bias b − W·A1⁻¹·v1).");
    if (module == QLatin1String("embed_tokens"))
        return {module, QStringLiteral("embed_tokens"), {tr("rows A1 w + v1"), tr("not quantized")}, Fill::Stub,
                tr("<p><b>embed_tokens</b>: not quantized. T1 is folded into its rows (A1·w + v1), so the residual "
                   "stream enters layer 0 already transformed.</p>")};
    if (module == QLatin1String("lm_head"))
        return {module, tr("norm → lm_head"), {tr("W A1⁻¹, γ folded"), tr("not quantized")}, Fill::Stub,
                tr("<p>Final RMSNorm (γ folded into lm_head), then <b>lm_head</b>: not quantized (the peers' "
                   "default). T1 folded: W·A1⁻¹ with bias −W·A1⁻¹·v1.</p>")};
    if (module == QLatin1String("input_layernorm"))
        return {module, tr("input RMSNorm"), {tr("γ folded into q, k, v")}, Fill::Norm,
                tr("<p><b>input_layernorm</b>: its weight γ is folded into q_proj, k_proj and v_proj "
                   "(W ← W·diag(γ)), so it only normalizes, on the T1-transformed stream.</p>")};
    if (module == QLatin1String("post_attention_layernorm"))
        return {module, tr("post-attn RMSNorm"), {tr("γ folded into gate, up")}, Fill::Norm,
                tr("<p><b>post_attention_layernorm</b>: its weight γ is folded into gate_proj and up_proj "
                   "(W ← W·diag(γ)).</p>")};
    if (module == QLatin1String("q_proj"))
        return {module, module, {i.hasModel ? tr("%1 heads").arg(i.heads) : tr("all heads"), qkvFold}, Fill::Linear,
                linearTip.arg(module, readsStream)};
    if (module == QLatin1String("k_proj"))
        return {module, module, {kvHeads, qkvFold}, Fill::Linear,
                linearTip.arg(module, readsStream + tr(" Grouped-query attention: fewer kv heads than q heads."))};
    if (module == QLatin1String("v_proj"))
        return {module, module, {kvHeads, qkvFold + tr(", T2 rows")}, Fill::Linear,
                linearTip.arg(module, readsStream + tr(" T2 folded into its output rows, per kv head (V·A2 + v2)."))};
    if (module == QLatin1String("q_norm") || module == QLatin1String("k_norm"))
        return {module, module, {tr("RMSNorm per head")}, Fill::Norm,
                tr("<p><b>%1</b> (Qwen3): RMSNorm of each head before RoPE, after the projection.</p>").arg(module)};
    if (module == QLatin1String("attention"))
        return {module, tr("RoPE + attention"), {tr("softmax(QKᵀ/√d)·V"), tr("scores, KV: not quantized")}, Fill::Op,
                tr("<p>RoPE on q and k, then softmax(QKᵀ/√d)·V per head. Attention scores and the KV cache are "
                   "<b>not quantized</b>.</p>")};
    if (module == QLatin1String("o_proj"))
        return {module, module, {tr("A1 W A2⁻¹ per head") + (i.oBias ? tr(" + bias") : QString())}, Fill::Linear,
                linearTip.arg(module, tr("T2's inverse A2⁻¹ folded into the input columns of every head, T1 into "
                                         "its output rows (A1·W, bias A1·b)."))};
    if (i.experts > 0) { // a sparse layer: a router and the experts' SwiGLU, each expert its own linears
        const QString each = tr("× %1 experts").arg(i.experts);
        if (module == QLatin1String("gate_proj") || module == QLatin1String("up_proj"))
            return {module, module, {each, in}, Fill::Linear,
                    linearTip.arg(module, tr("Every expert has its own, quantized with the Hessian of the tokens "
                                             "routed to it. ") + readsStream)};
        if (module == QLatin1String("act_fn"))
            return {module, tr("router → top %1").arg(i.expertsPerToken), {tr("SiLU(gate) ⊙ up per expert"), tr("Σ weight · expert")},
                    Fill::Op,
                    tr("<p>The <b>router</b> (W A1⁻¹, kept in full precision, reading the unquantized input) picks "
                       "%1 of %2 experts per token by softmax and top-k; each chosen expert computes SiLU(gate) ⊙ up "
                       "and its down_proj, weighted by its routing probability.</p>")
                        .arg(i.expertsPerToken)
                        .arg(i.experts)};
        if (module == QLatin1String("down_proj"))
            return {module, module, {each, tr("A1 W H3ᵀ")}, Fill::Linear,
                    linearTip.arg(module, tr("Every expert's: T3's inverse folded into its input columns, T1 into its "
                                             "output rows; its input is quantized per expert."))};
    }
    if (module == QLatin1String("gate_proj") || module == QLatin1String("up_proj"))
        return {module, module, {mlpFold}, Fill::Linear, linearTip.arg(module, readsStream)};
    if (module == QLatin1String("act_fn"))
        return {module, tr("SiLU(gate) ⊙ up"), {}, Fill::Op, tr("<p>SiLU of gate_proj times up_proj, element-wise.</p>")};
    // down_proj
    return {module, module, {tr("A1 W H3ᵀ") + (i.mlpBias ? tr(" + bias") : QString())}, Fill::Linear,
            linearTip.arg(module, tr("T3's inverse Hᵀ folded into its input columns, T1 into its output rows "
                                     "(A1·W, bias A1·b)."))};
}

QSizeF Layouter::measure(const Spec& s) const {
    double w = adv(Role::Title, s.title) + (s.fill == Fill::Linear ? 0.4 * u + m_tagW : 0);
    for (const QString& sub : s.subs) w = std::max(w, adv(Role::Sub, sub));
    return {w + 2 * m_padX, 2 * m_padY + h(Role::Title) + s.subs.size() * h(Role::Sub)};
}

QRectF Layouter::text(const QString& t, Role r, double x, double cy, bool centred) {
    const double w = adv(r, t);
    const QRectF rect(centred ? x - w / 2 : x, cy - h(r) / 2, w, h(r));
    m_s.texts.push_back({rect, t, r});
    return rect;
}

// A box of width w and height hgt centred on cx; its lines centred, a linear's title followed by
// the "W: MX" tag.
QRectF Layouter::place(const Spec& s, double cx, double top, double w, double hgt) {
    const QRectF r(cx - w / 2, top, w, hgt);
    const double contentH = h(Role::Title) + s.subs.size() * h(Role::Sub);
    double y = top + (hgt - contentH) / 2;
    const bool linear = s.fill == Fill::Linear;
    const double lineW = adv(Role::Title, s.title) + (linear ? 0.4 * u + m_tagW : 0);
    const QRectF title = text(s.title, Role::Title, cx - lineW / 2, y + h(Role::Title) / 2);
    if (linear) {
        const QRectF tag(title.right() + 0.4 * u, title.center().y() - m_tagH / 2, m_tagW, m_tagH);
        m_s.chips.push_back({tag, 3});
        text(weightTag(s.module), Role::Tag, tag.center().x(), tag.center().y(), true);
        m_s.tips.push_back({tag, kWeightTip});
    }
    y += h(Role::Title);
    for (const QString& sub : s.subs) {
        text(sub, Role::Sub, cx, y + h(Role::Sub) / 2, true);
        y += h(Role::Sub);
    }
    m_s.boxes.push_back({s.module, r, s.fill, QStringList{s.title} + s.subs});
    m_s.tips.push_back({r, s.tip});
    return r;
}

void Layouter::badge(int t, const QPointF& c) {
    const QRectF r(c.x() - m_bw / 2, c.y() - m_bh / 2, m_bw, m_bh);
    m_s.badges[t] = r;
    m_s.chips.push_back({r, t});
    m_s.tips.push_back({r, transformTip(t, m_info.t3Block)});
    text(QStringLiteral("T%1").arg(t + 1), Role::Badge, c.x(), c.y(), true);
}

void Layouter::marker(PointKind kind, double x, double y) {
    auto& mk = m_s.markers[int(kind)];
    mk.name = m_info.points[int(kind)];
    mk.text = markerText(mk.name);
    mk.rect = QRectF(x - m_m / 2, y - m_m / 2, m_m, m_m);
    const double w = adv(Role::Sub, mk.text);
    mk.label = QRectF(x + m_m / 2 + 0.35 * u, y - h(Role::Sub) / 2, w, h(Role::Sub));
    const int width = m_info.widths[int(kind)];
    mk.tip = tr("<p><b>%1</b></p><p>Activation quantization point (MX)%2: %3. Click to select it.</p>")
                 .arg(mk.name, width > 0 ? tr(", width %1").arg(width) : QString(), pointRole(kind));
}

BlockDiagramScene Layouter::build(const QRectF& canvas) {
    BlockDiagramScene& s = m_s;
    s.canvas = canvas;
    const double g = m_g, hS = h(Role::Sub), gap = 0.7 * u, lgap = 0.35 * u, kk = std::max(m_m, hS);
    const bool qkn = m_info.qkNorm;
    const Spec embed = spec(QStringLiteral("embed_tokens")), lm = spec(QStringLiteral("lm_head")),
               inNorm = spec(QStringLiteral("input_layernorm")), q = spec(QStringLiteral("q_proj")),
               k = spec(QStringLiteral("k_proj")), v = spec(QStringLiteral("v_proj")),
               qn = spec(QStringLiteral("q_norm")), kn = spec(QStringLiteral("k_norm")),
               attn = spec(QStringLiteral("attention")), o = spec(QStringLiteral("o_proj")),
               post = spec(QStringLiteral("post_attention_layernorm")), gate = spec(QStringLiteral("gate_proj")),
               up = spec(QStringLiteral("up_proj")), act = spec(QStringLiteral("act_fn")),
               down = spec(QStringLiteral("down_proj"));
    auto W = [&](const Spec& sp) { return measure(sp).width(); };
    auto H = [&](const Spec& sp) { return measure(sp).height(); };
    auto markerExt = [&](PointKind kind) {
        return m_m / 2 + lgap + adv(Role::Sub, markerText(m_info.points[int(kind)]));
    };
    const QString t3Text = tr("online Hadamard, B=%1").arg(m_info.t3Block);
    const QString title = m_info.hasModel ? tr("decoder layer %1 (layers 0–%2)").arg(m_info.layer).arg(m_info.numLayers - 1)
                                          : tr("decoder layer 0 (generic Llama block)");

    // Widths: the attention column (q, k, v side by side, the spine through k), the MLP column
    // (gate, up either side of the spine); a marker's or T3's label runs right of its spine.
    double qkvW = std::max({W(q), W(k), W(v), m_bw + 2 * m_padX});
    if (qkn) qkvW = std::max({qkvW, W(qn), W(kn)});
    const double rowA = 3 * qkvW + 2 * gap, attnW = std::max(W(attn), rowA);
    const double colA = std::max({rowA, W(inNorm), attnW, W(o), 2 * markerExt(PointKind::QkvInput),
                                  2 * markerExt(PointKind::OProjInput)});
    const double guW = std::max(W(gate), W(up)), rowM = 2 * guW + gap, actW = std::max(W(act), rowM);
    const double colM = std::max({rowM, W(post), actW, W(down), 2 * (m_bw / 2 + lgap + adv(Role::Sub, t3Text)),
                                  2 * markerExt(PointKind::GateUpInput), 2 * markerExt(PointKind::DownProjInput)});
    const double pad = 0.8 * u, ret = 0.9 * u, r = 0.5 * u, side = std::max(0.7 * u, m_bw / 2 + 0.2 * u),
                 join = m_bw / 2 + 0.5 * u;
    const double frameW = pad + colA + ret + r + 0.9 * u + colM + ret + r + pad;
    const double minW = 2 * side + 2 * join + frameW, slack = std::max(0.0, W(embed) + W(lm) + u - minW);
    const double total = minW + slack;
    s.fits = total <= canvas.width() + 0.01 && adv(Role::Sub, title) + 2 * u <= frameW;

    const double left = canvas.left() + std::max(0.0, (canvas.width() - total) / 2), top = canvas.top();
    const double xe = left + side, xl = left + total - side, frameLeft = xe + join + slack / 2;
    const double ax = frameLeft + pad + colA / 2, xRetA = frameLeft + pad + colA + ret;
    const double mx = xRetA + r + 0.9 * u + colM / 2, xRetM = mx + colM / 2 + ret;

    // Top: the stubs, T1 where the embedding enters the stream, the frame and the stream.
    const double stubH = std::max(H(embed), H(lm));
    const QRectF eR = place(embed, left + W(embed) / 2, top, W(embed), stubH);
    place(lm, left + total - W(lm) / 2, top, W(lm), stubH);
    const double frameTop = eR.bottom() + 0.4 * u * g + hS / 2;
    const double ys = std::max(frameTop + hS / 2 + 0.9 * u * g, eR.bottom() + m_bh + 0.8 * u);
    badge(0, QPointF(xe, (eR.bottom() + ys) / 2));

    // Rows of both branches.
    const double row1 = ys + 1.0 * u * g, h1 = std::max(H(inNorm), H(post));
    const QRectF inR = place(inNorm, ax, row1, W(inNorm), h1), postR = place(post, mx, row1, W(post), h1);
    const double m1 = inR.bottom() + 0.45 * u * g + kk / 2, bar = m1 + kk / 2 + 0.45 * u * g;
    const double row2 = bar + 0.55 * u * g, h2 = std::max({H(q), H(k), H(v), H(gate), H(up)});
    const double qx = ax - qkvW - gap, vx = ax + qkvW + gap, gx = mx - (guW + gap) / 2, ux = mx + (guW + gap) / 2;
    place(q, qx, row2, qkvW, h2);
    place(k, ax, row2, qkvW, h2);
    place(v, vx, row2, qkvW, h2);
    place(gate, gx, row2, guW, h2);
    place(up, ux, row2, guW, h2);
    const double band = row2 + h2 + 0.45 * u * g, bandH = std::max(m_bh, qkn ? std::max(H(qn), H(kn)) : 0.0);
    if (qkn) {
        place(qn, qx, band, qkvW, bandH);
        place(kn, ax, band, qkvW, bandH);
    }
    badge(1, QPointF(vx, band + bandH / 2));
    const double row3 = band + bandH + 0.45 * u * g, h3 = std::max(H(attn), H(act));
    const QRectF attR = place(attn, ax, row3, attnW, h3), actR = place(act, mx, row3, actW, h3);
    const double t3y = actR.bottom() + 0.45 * u * g + m_bh / 2;
    badge(2, QPointF(mx, t3y));
    text(t3Text, Role::Sub, mx + m_bw / 2 + lgap, t3y);
    const double m3 = t3y + m_bh / 2 + 0.35 * u * g + kk / 2;
    const double row4 = m3 + kk / 2 + 0.45 * u * g, h4 = std::max(H(o), H(down));
    const QRectF oR = place(o, ax, row4, W(o), h4), dR = place(down, mx, row4, W(down), h4);
    s.frame = QRectF(frameLeft, frameTop, frameW, oR.bottom() + 0.7 * u * g - frameTop);
    const QRectF titleRect(s.frame.center().x() - adv(Role::Sub, title) / 2, frameTop - hS / 2, adv(Role::Sub, title), hS);
    s.texts.push_back({titleRect, title, Role::Sub, true});
    // The stream's name above it, left of the title, where there is room for it.
    const QString stream = tr("residual stream: A1 x + v1");
    if (frameLeft + pad + adv(Role::Sub, stream) + u <= std::min(titleRect.left(), xRetA - r)) {
        const QRectF sr = text(stream, Role::Sub, frameLeft + pad, ys - 0.25 * u - hS / 2);
        s.tips.push_back({sr, transformTip(0, 0)});
    }
    marker(PointKind::QkvInput, ax, m1);
    marker(PointKind::OProjInput, ax, m3);
    marker(PointKind::GateUpInput, mx, m1);
    marker(PointKind::DownProjInput, mx, m3);

    // Edges: the stream, then each branch down its spine and back up to its residual add.
    connect({xe, xl, ys, r, xRetA, xRetM, ax, mx, row1, bar, qx, vx, gx, ux, row2, h2, band, bandH, row3, row4, eR, inR,
             postR, attR, actR, oR, dR});

    s.bottom = legend(s.frame.bottom() + 0.8 * u * g);
    s.fits = s.fits && s.bottom <= canvas.bottom() + 0.01;
    return std::move(m_s);
}

// The diagram's edges from the positions build chose (Joints: same names as there).
void Layouter::connect(const Joints& j) {
    BlockDiagramScene& s = m_s;
    const bool qkn = m_info.qkNorm;
    arrow({{j.xe, j.eR.bottom()}, {j.xe, j.ys}, {j.xRetA - j.r, j.ys}});
    arrow({{j.xRetA + j.r, j.ys}, {j.xRetM - j.r, j.ys}});
    arrow({{j.xRetM + j.r, j.ys}, {j.xl, j.ys}, {j.xl, j.eR.bottom()}});
    s.forks = {{j.ax, j.ys}, {j.mx, j.ys}};
    s.adds = {{j.xRetA, j.ys}, {j.xRetM, j.ys}};
    s.addRadius = j.r;
    for (const QPointF& a : s.adds) s.tips.push_back({QRectF(a.x() - j.r, a.y() - j.r, 2 * j.r, 2 * j.r), tr("Residual add")});
    for (const auto& [x, normR] : {std::pair{j.ax, j.inR}, std::pair{j.mx, j.postR}}) {
        arrow({{x, j.ys}, {x, j.row1}});
        line({{x, normR.bottom()}, {x, j.bar}});
    }
    line({{j.qx, j.bar}, {j.vx, j.bar}});
    line({{j.gx, j.bar}, {j.ux, j.bar}});
    for (double x : {j.qx, j.ax, j.vx, j.gx, j.ux}) arrow({{x, j.bar}, {x, j.row2}});
    for (double x : {j.qx, j.ax}) {
        if (qkn) {
            arrow({{x, j.row2 + j.h2}, {x, j.band}});
            arrow({{x, j.band + j.bandH}, {x, j.row3}});
        } else {
            arrow({{x, j.row2 + j.h2}, {x, j.row3}});
        }
    }
    for (double x : {j.vx, j.gx, j.ux}) arrow({{x, j.row2 + j.h2}, {x, j.row3}});
    arrow({{j.ax, j.attR.bottom()}, {j.ax, j.row4}});
    arrow({{j.mx, j.actR.bottom()}, {j.mx, j.row4}});
    arrow({{j.oR.right(), j.oR.center().y()}, {j.xRetA, j.oR.center().y()}, {j.xRetA, j.ys + j.r}});
    arrow({{j.dR.right(), j.dR.center().y()}, {j.xRetM, j.dR.center().y()}, {j.xRetM, j.ys + j.r}});
}

// The caption: what each colour and mark means and what stays in full precision. Entries flow in
// centred rows across the canvas. Returns the bottom.
double Layouter::legend(double top) {
    struct Entry {
        int icon; // 0..2: T badge, 3: marker, 4: weight tag, 5: none
        QString text, tip;
    };
    const QVector<Entry> entries = {
        {0, tr("T1: residual stream, one per model, folded (free at inference)"), transformTip(0, 0)},
        {1, tr("T2: value path per head, one per layer, folded (free at inference)"), transformTip(1, 0)},
        {2, tr("T3: block Hadamard before down_proj, online"), transformTip(2, m_info.t3Block)},
        {3, tr("activation quantization point (MX), click to select"), QString()},
        {4, tr("weights quantized (MX)"), kWeightTip},
        {5, tr("Not quantized: embedding, lm_head, attention scores, KV cache"), QString()}};
    auto iconW = [&](int icon) { return icon < 3 ? m_bw : icon == 3 ? m_m : icon == 4 ? m_tagW : 0.0; };
    auto entryW = [&](const Entry& e) { return iconW(e.icon) + (e.icon < 5 ? 0.35 * u : 0) + adv(Role::Sub, e.text); };
    const double rowH = std::max({m_bh, h(Role::Sub), m_tagH, m_m}) + 0.3 * u, spacing = 1.4 * u;
    const double width = m_s.canvas.width();
    double y = top;
    for (int first = 0; first < entries.size();) {
        int last = first;
        double w = entryW(entries[first]);
        while (last + 1 < entries.size() && w + spacing + entryW(entries[last + 1]) <= width)
            w += spacing + entryW(entries[++last]);
        if (w > width + 0.01) m_s.fits = false;
        double x = m_s.canvas.left() + std::max(0.0, (width - w) / 2);
        const double cy = y + rowH / 2;
        for (int i = first; i <= last; ++i) {
            const Entry& e = entries[i];
            const double iw = iconW(e.icon);
            if (e.icon < 3) {
                const QRectF chip(x, cy - m_bh / 2, iw, m_bh);
                m_s.chips.push_back({chip, e.icon});
                text(QStringLiteral("T%1").arg(e.icon + 1), Role::Badge, chip.center().x(), cy, true);
            } else if (e.icon == 3) {
                m_s.legendMarker = QRectF(x, cy - m_m / 2, m_m, m_m);
            } else if (e.icon == 4) {
                m_s.chips.push_back({QRectF(x, cy - m_tagH / 2, iw, m_tagH), 3});
                text(weightTag(), Role::Tag, x + iw / 2, cy, true);
            }
            const QRectF t = text(e.text, Role::Sub, x + iw + (e.icon < 5 ? 0.35 * u : 0), cy);
            if (!e.tip.isEmpty()) m_s.tips.push_back({QRectF(x, t.top(), t.right() - x, t.height()), e.tip});
            x += entryW(e) + spacing;
        }
        y += rowH;
        first = last + 1;
    }
    return y;
}

} // namespace

BlockDiagramScene layoutBlockDiagram(const QWidget& widget, const BlockDiagramInfo& info, double pt, double gap,
                                     const QRectF& canvas) {
    return Layouter(&widget, info, pt, gap).build(canvas);
}

} // namespace latmix::gui
