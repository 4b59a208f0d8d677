#include "transforms/Hadamard.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace latmix::transforms {
namespace {

bool isPowerOfTwo(std::int64_t n) { return n >= 1 && (n & (n - 1)) == 0; }

// q = p^e with p prime, e ≥ 1.
bool primePower(std::int64_t q, std::int64_t& p, int& e) {
    if (q < 2) return false;
    p = q;
    for (std::int64_t f = 2; f * f <= q; ++f)
        if (q % f == 0) {
            p = f;
            break;
        }
    e = 0;
    while (q % p == 0) {
        q /= p;
        ++e;
    }
    return q == 1;
}

// Paley I: order b = q + 1, q ≡ 3 (mod 4) a prime power.
bool paleyIOrder(std::int64_t b, std::int64_t* q = nullptr) {
    std::int64_t p;
    int e;
    if (b < 4 || !primePower(b - 1, p, e) || (b - 1) % 4 != 3) return false;
    if (q) *q = b - 1;
    return true;
}

// Paley II: order b = 2(q + 1), q ≡ 1 (mod 4) a prime power.
bool paleyIIOrder(std::int64_t b, std::int64_t* q = nullptr) {
    std::int64_t p;
    int e;
    if (b < 4 || b % 4 != 0) return false;
    const std::int64_t qq = b / 2 - 1;
    if (!primePower(qq, p, e) || qq % 4 != 1) return false;
    if (q) *q = qq;
    return true;
}

// ---- GF(q), q = p^e: element a ↔ polynomial with base-p digits of a as coefficients (low first).
class GaloisField {
public:
    explicit GaloisField(std::int64_t q) : m_q(q) {
        if (!primePower(q, m_p, m_e)) throw std::logic_error("GF: not a prime power");
        m_modulus = findIrreducible();
        m_digits.resize(static_cast<size_t>(m_q * m_e));
        for (std::int64_t a = 0; a < m_q; ++a) {
            std::int64_t r = a;
            for (int t = 0; t < m_e; ++t, r /= m_p) m_digits[static_cast<size_t>(a * m_e + t)] = static_cast<int>(r % m_p);
        }
    }
    std::int64_t size() const { return m_q; }

    std::int64_t sub(std::int64_t a, std::int64_t b) const {
        std::int64_t r = 0, w = 1;
        for (int t = 0; t < m_e; ++t, w *= m_p) r += w * ((digit(a, t) - digit(b, t) + m_p) % m_p);
        return r;
    }
    std::int64_t mul(std::int64_t a, std::int64_t b) const {
        std::vector<std::int64_t> c(static_cast<size_t>(2 * m_e - 1), 0);
        for (int i = 0; i < m_e; ++i)
            for (int j = 0; j < m_e; ++j) c[static_cast<size_t>(i + j)] += digit(a, i) * digit(b, j);
        for (auto& v : c) v %= m_p;
        reduce(c, m_modulus);
        std::int64_t r = 0, w = 1;
        for (int t = 0; t < m_e; ++t, w *= m_p) r += w * c[static_cast<size_t>(t)];
        return r;
    }
    // Quadratic character χ: 0 at 0, 1 on nonzero squares, -1 elsewhere.
    std::vector<signed char> quadraticCharacter() const {
        std::vector<signed char> chi(static_cast<size_t>(m_q), -1);
        chi[0] = 0;
        for (std::int64_t a = 1; a < m_q; ++a) chi[static_cast<size_t>(mul(a, a))] = 1;
        return chi;
    }

private:
    std::int64_t digit(std::int64_t a, int t) const { return m_digits[static_cast<size_t>(a * m_e + t)]; }

    // c ← c mod f (f monic, coefficients low first); keeps deg f coefficients of c.
    void reduce(std::vector<std::int64_t>& c, const std::vector<std::int64_t>& f) const {
        const int df = static_cast<int>(f.size()) - 1;
        for (int i = static_cast<int>(c.size()) - 1; i >= df; --i) {
            const std::int64_t lead = c[static_cast<size_t>(i)] % m_p;
            if (lead == 0) continue;
            for (int j = 0; j <= df; ++j) {
                auto& v = c[static_cast<size_t>(i - df + j)];
                v = ((v - lead * f[static_cast<size_t>(j)]) % m_p + m_p) % m_p;
            }
        }
        c.resize(static_cast<size_t>(std::max(df, 1)), 0);
    }

    // Monic degree-e polynomial over GF(p) with no monic factor of degree 1..e/2 (brute force).
    std::vector<std::int64_t> findIrreducible() const {
        if (m_e == 1) return {0, 1}; // x: GF(p) itself, reduction only drops nothing
        std::int64_t count = 1;
        for (int t = 0; t < m_e; ++t) count *= m_p;
        for (std::int64_t low = 1; low < count; ++low) {
            std::vector<std::int64_t> f(static_cast<size_t>(m_e + 1), 0);
            std::int64_t r = low;
            for (int t = 0; t < m_e; ++t, r /= m_p) f[static_cast<size_t>(t)] = r % m_p;
            f[static_cast<size_t>(m_e)] = 1;
            if (f[0] == 0) continue; // divisible by x
            if (!hasFactorUpTo(f, m_e / 2)) return f;
        }
        throw std::logic_error("GF: no irreducible polynomial found");
    }
    bool hasFactorUpTo(const std::vector<std::int64_t>& f, int maxDegree) const {
        for (int d = 1; d <= maxDegree; ++d) {
            std::int64_t count = 1;
            for (int t = 0; t < d; ++t) count *= m_p;
            for (std::int64_t low = 0; low < count; ++low) {
                std::vector<std::int64_t> g(static_cast<size_t>(d + 1), 0);
                std::int64_t r = low;
                for (int t = 0; t < d; ++t, r /= m_p) g[static_cast<size_t>(t)] = r % m_p;
                g[static_cast<size_t>(d)] = 1;
                auto rem = f;
                reduce(rem, g);
                bool zero = true;
                for (auto v : rem) zero = zero && v == 0;
                if (zero) return true;
            }
        }
        return false;
    }

    std::int64_t m_q, m_p = 0;
    int m_e = 0;
    std::vector<std::int64_t> m_modulus;
    std::vector<int> m_digits;
};

// Jacobsthal matrix Q_ab = χ(a − b) over GF(q), [q, q] int8.
std::vector<signed char> jacobsthal(std::int64_t q) {
    const GaloisField f(q);
    const auto chi = f.quadraticCharacter();
    std::vector<signed char> m(static_cast<size_t>(q * q));
    for (std::int64_t a = 0; a < q; ++a)
        for (std::int64_t b = 0; b < q; ++b) m[static_cast<size_t>(a * q + b)] = chi[static_cast<size_t>(f.sub(a, b))];
    return m;
}

// Paley I: H = I + S with S = [[0, 1ᵀ], [−1, Q]] (skew, S Sᵀ = q I since q ≡ 3 mod 4), order q+1.
at::Tensor paleyI(std::int64_t q) {
    const auto jq = jacobsthal(q);
    const std::int64_t n = q + 1;
    auto h = at::empty({n, n}, at::kDouble);
    double* d = h.data_ptr<double>();
    for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            double s;
            if (i == 0) s = j == 0 ? 0.0 : 1.0;
            else if (j == 0) s = -1.0;
            else s = jq[static_cast<size_t>((i - 1) * q + (j - 1))];
            d[i * n + j] = s + (i == j ? 1.0 : 0.0);
        }
    return h;
}

// Paley II: S = [[0, 1ᵀ], [1, Q]] (symmetric, q ≡ 1 mod 4); each 0 becomes [[1, −1], [−1, −1]] and
// each ±1 becomes ±[[1, 1], [1, −1]]; order 2(q+1).
at::Tensor paleyII(std::int64_t q) {
    const auto jq = jacobsthal(q);
    const std::int64_t m = q + 1, n = 2 * m;
    auto h = at::empty({n, n}, at::kDouble);
    double* d = h.data_ptr<double>();
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < m; ++j) {
            int s;
            if (i == 0) s = j == 0 ? 0 : 1;
            else if (j == 0) s = 1;
            else s = jq[static_cast<size_t>((i - 1) * q + (j - 1))];
            const double blk[2][2] = {{s == 0 ? 1.0 : s, s == 0 ? -1.0 : s},
                                      {s == 0 ? -1.0 : s, s == 0 ? -1.0 : -s}};
            for (int a = 0; a < 2; ++a)
                for (int b = 0; b < 2; ++b) d[(2 * i + a) * n + (2 * j + b)] = blk[a][b];
        }
    return h;
}

// Sylvester H_n, n = 2^k: (-1)^popcount(i & j).
at::Tensor sylvester(std::int64_t n) {
    auto h = at::empty({n, n}, at::kDouble);
    double* d = h.data_ptr<double>();
    for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < n; ++j) d[i * n + j] = (__builtin_popcountll(static_cast<unsigned long long>(i & j)) & 1) ? -1.0 : 1.0;
    return h;
}

// ---- Planning: which construction builds order n (no matrices built).
struct Plan {
    enum Kind { None, Sylvester, PaleyI, PaleyII, Kron } kind = None;
    std::int64_t q = 0;       // Paley
    std::int64_t a = 0, b = 0; // Kron: H_a ⊗ H_b
};

Plan plan(std::int64_t n, std::map<std::int64_t, Plan>& memo) {
    if (auto it = memo.find(n); it != memo.end()) return it->second;
    Plan p;
    std::int64_t q = 0;
    if (n < 1) {
    } else if (isPowerOfTwo(n)) {
        p.kind = Plan::Sylvester;
    } else if (n % 4 != 0) {
    } else {
        // Smallest Paley base b = m·2^j, Sylvester-doubled up to n: H_{n/b} ⊗ H_b (b = n: Paley itself).
        std::int64_t m = n;
        while (m % 2 == 0) m /= 2;
        for (std::int64_t b = m; b <= n && p.kind == Plan::None; b *= 2) {
            if (!paleyIOrder(b) && !paleyIIOrder(b)) continue;
            if (b < n) p = {Plan::Kron, 0, n / b, b};
            else if (paleyIOrder(n, &q)) p = {Plan::PaleyI, q, 0, 0};
            else if (paleyIIOrder(n, &q)) p = {Plan::PaleyII, q, 0, 0};
        }
        // Any other split into two constructible factors, smallest first factor first.
        for (std::int64_t a = 2; a * a <= n && p.kind == Plan::None; ++a)
            if (n % a == 0 && plan(a, memo).kind != Plan::None && plan(n / a, memo).kind != Plan::None)
                p = {Plan::Kron, 0, a, n / a};
    }
    memo[n] = p;
    return p;
}

Plan plan(std::int64_t n) {
    std::map<std::int64_t, Plan> memo;
    return plan(n, memo);
}

at::Tensor build(std::int64_t n) {
    const Plan p = plan(n);
    switch (p.kind) {
    case Plan::Sylvester: return sylvester(n);
    case Plan::PaleyI: return paleyI(p.q);
    case Plan::PaleyII: return paleyII(p.q);
    case Plan::Kron: return at::kron(build(p.a), build(p.b));
    case Plan::None: break;
    }
    return {};
}

std::string describe(std::int64_t n) {
    const Plan p = plan(n);
    switch (p.kind) {
    case Plan::Sylvester: {
        int k = 0;
        while ((std::int64_t(1) << k) < n) ++k;
        return "Sylvester 2^" + std::to_string(k);
    }
    case Plan::PaleyI: return "Paley I (q=" + std::to_string(p.q) + ")";
    case Plan::PaleyII: return "Paley II (q=" + std::to_string(p.q) + ")";
    case Plan::Kron: return describe(p.a) + " ⊗ " + describe(p.b);
    case Plan::None: break;
    }
    return {};
}

} // namespace

bool hasHadamard(std::int64_t n) { return plan(n).kind != Plan::None; }

std::string hadamardConstruction(std::int64_t n) { return describe(n); }

at::Tensor hadamardMatrix(std::int64_t n) {
    if (!hasHadamard(n)) {
        std::string why;
        if (n < 1) why = "the size must be positive";
        else if (n > 2 && n % 4 != 0) why = "a Hadamard matrix of order > 2 needs a multiple of 4";
        else why = "no Sylvester, Paley I/II or Kronecker-product construction is known here";
        throw std::invalid_argument("Hadamard matrix of size " + std::to_string(n) + " not available (" + why +
                                    "); use a block-diagonal transform instead, e.g. block-hadamard with block 32");
    }
    return build(n);
}

namespace {

// H_n in float64, kept for the orders the fast product meets as a dense factor (a Paley base
// such as 28 in 14336 = 512·28): built once per process, small (b² doubles).
at::Tensor denseFactor(std::int64_t n) {
    static std::mutex mutex;
    static std::map<std::int64_t, at::Tensor> built;
    const std::lock_guard<std::mutex> lock(mutex);
    auto& h = built[n];
    if (!h.defined()) h = build(n);
    return h;
}

// Butterflies on bit h of the column index, in place: (a, b) ↦ (a + b, a − b); the stages
// commute, and together they are H_n = H_2 ⊗ … ⊗ H_2 in natural (Sylvester) order. A chunk of
// ~1 MiB of rows at a time: it stays in cache through the log2(n) passes, and the temporary half
// is small enough for the allocator to reuse (no fresh pages per stage). y: [m, n], contiguous.
void butterflies(const at::Tensor& y) {
    const std::int64_t n = y.size(1), rows = y.size(0);
    const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / (n * y.element_size()));
    for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const std::int64_t m = std::min(chunk, rows - r0);
        const auto part = y.narrow(0, r0, m);
        for (std::int64_t h = n / 2; h >= 1; h /= 2) {
            const auto v = part.view({m, n / (2 * h), 2, h});
            auto a = v.select(2, 0), b = v.select(2, 1);
            const auto old = a.clone();
            a.add_(b);
            b.sub_(old).neg_(); // old − b: negation is exact
        }
    }
}

// Rows y [m, n] (contiguous, owned: may be overwritten) times H_nᵀ (r ↦ H_n r), or times H_n
// (r ↦ H_nᵀ r) when transposed, following the construction hadamardMatrix(n) uses: butterflies
// for Sylvester (symmetric), the dense matrix for a Paley order, and for H_a ⊗ H_b the row seen
// as R [a, b] goes to H_a R H_bᵀ: H_b along the last axis, then H_a along the first.
at::Tensor mixRows(at::Tensor y, std::int64_t n, bool transposed) {
    const Plan p = plan(n);
    const std::int64_t m = y.size(0);
    switch (p.kind) {
    case Plan::Sylvester: butterflies(y); return y;
    case Plan::PaleyI:
    case Plan::PaleyII: {
        const auto h = denseFactor(n).to(y.options());
        return at::matmul(y, transposed ? h : h.t());
    }
    case Plan::Kron: {
        auto z = mixRows(y.view({m * p.a, p.b}), p.b, transposed);
        z = mixRows(z.view({m, p.a, p.b}).transpose(1, 2).contiguous().view({m * p.b, p.a}), p.a, transposed);
        return z.view({m, p.b, p.a}).transpose(1, 2).contiguous().view({m, n});
    }
    case Plan::None: break;
    }
    throw std::logic_error("mixRows: no Hadamard construction of order " + std::to_string(n));
}

at::Tensor hadamardProduct(const at::Tensor& x, const at::Tensor& d, bool transposed, const char* what) {
    const std::int64_t n = d.numel();
    if (n < 1 || !hasHadamard(n) || x.dim() < 1 || x.size(-1) != n)
        throw std::invalid_argument(std::string(what) + ": needs rows of a Hadamard order equal to the diagonal's (" +
                                    std::to_string(n) + "), got " + std::to_string(x.dim() ? x.size(-1) : 0));
    const auto sizes = x.sizes().vec();
    const auto dd = d.to(x.options());
    if (transposed) return (mixRows(x.reshape({-1, n}).clone(at::MemoryFormat::Contiguous), n, true) * dd).view(sizes);
    return mixRows((x * dd).reshape({-1, n}).contiguous(), n, false).view(sizes);
}

// hadamardMatrix(n) as its Kronecker factors, outermost first: H_n = F_1 ⊗ F_2 ⊗ … with each F
// Sylvester (dense undefined) or a Paley matrix; entry (i, j) is the product of the factors'
// entries at the mixed-radix digits of i and j (the last factor's digit varies fastest).
struct Factor {
    std::int64_t order;
    at::Tensor dense; // float64, Paley only
};

void factorsOf(std::int64_t n, std::vector<Factor>& out) {
    const Plan p = plan(n);
    if (p.kind == Plan::Kron) {
        factorsOf(p.a, out);
        factorsOf(p.b, out);
    } else {
        out.push_back({n, p.kind == Plan::Sylvester ? at::Tensor() : denseFactor(n)});
    }
}

} // namespace

BlockDiagonal hadamardDiagonalBlocks(std::int64_t n, std::int64_t block) {
    if (!hasHadamard(n) || block < 1)
        throw std::invalid_argument("hadamardDiagonalBlocks: no Hadamard matrix of order " + std::to_string(n) +
                                    " or block " + std::to_string(block) + " < 1");
    std::vector<Factor> factors;
    factorsOf(n, factors);
    auto entry = [&](std::int64_t i, std::int64_t j) {
        double v = 1;
        for (auto f = factors.rbegin(); f != factors.rend(); ++f) {
            const std::int64_t fi = i % f->order, fj = j % f->order;
            if (f->dense.defined()) v *= f->dense.data_ptr<double>()[fi * f->order + fj];
            else if (__builtin_popcountll(static_cast<unsigned long long>(fi & fj)) & 1) v = -v;
            i /= f->order;
            j /= f->order;
        }
        return v;
    };
    return BlockDiagonal::generate(n, block, [&](std::int64_t start, std::int64_t size) {
        auto b = at::empty({size, size}, at::kDouble);
        double* p = b.data_ptr<double>();
        for (std::int64_t r = 0; r < size; ++r)
            for (std::int64_t c = 0; c < size; ++c) p[r * size + c] = entry(start + r, start + c);
        return b;
    });
}

at::Tensor hadamardRows(const at::Tensor& x, const at::Tensor& d) { return hadamardProduct(x, d, false, "hadamardRows"); }

at::Tensor hadamardRowsTransposed(const at::Tensor& x, const at::Tensor& d) {
    return hadamardProduct(x, d, true, "hadamardRowsTransposed");
}

} // namespace latmix::transforms
