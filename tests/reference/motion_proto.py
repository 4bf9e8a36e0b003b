# SPDX-License-Identifier: MIT
"""numpy prototype of motion-compensated history (docs/algorithms.md §2b, "Next: motion
compensation"): not a volrec mode yet. Each history sample is kept with the rigid pose of its
epoch (rotation about the depth axis, lateral and axial shift); the pose of each epoch is
estimated by registering the new low-resolution samples against the previous output.

The output at a full-resolution column (default, "kriging"): of the samples of the last H
epochs of every interlacing phase, the one per epoch whose tissue point now lies nearest to the
column; of those the M nearest within R pitches; their ordinary-kriging weights under a
Gaussian correlation of length ell pitches and a nugget lam (the weights that sum to 1 and
minimise the expected squared error of a field of that correlation); each sample shifted
axially by the pose difference. With --nearest (the first version): the newest sample of each
phase only, weighted by a Gaussian of its distance (sigma 0.45, cut at rc = 1.5 pitches).

Estimation, per epoch e (after `warm` epochs), against the previous output's depth bands
kriged without the newest `exclude` epochs (--exclude N, default 4: the epochs whose samples
the scan pattern lines up with the new ones at one pitch an epoch) and blurred laterally (sigma
`blur` pitches, --blur S, default 0.8); --nearest registers against its own output, unblurred:
  - axial: the mean over the last `nax` epochs (default 4) of their axial pose plus the shift of
    this epoch's mean A-scan against theirs (cross-correlation over +-6 bins, parabolic peak),
    taken as measured (no alpha-beta); with --nearest (nax 0) the previous epoch's only, over
    +-4 bins, filtered as below;
  - lateral (theta, tx, ty): from the alpha-beta prediction, a search over rotation increments,
    then Levenberg-Marquardt on the residual between the new samples' depth bands (NB means over
    Z, after the axial shift) and the previous output's bands, bilinearly interpolated where the
    same tissue stood at e - 1;
  - the prediction's velocity follows the innovation with gain gb;
  - where the registration's residual per sample exceeds `reset` (default 3) times its median
    over the last 10 epochs, the history is dropped (the chain of poses is lost: the patient
    moved at once) and rebuilt from this epoch on; with --nearest never.

With kappa > 0 the output is blended with the newest epoch, interpolated, where the new samples
disagree with what the compensated history predicts for them (the adaptive mode's change test,
depth window 9, alpha = exp(-D / kappa^2)).

Usage: motion_proto.py [--nearest] [--blur S] [--exclude N] [--nax N] [--reset F] LOWRES.h5 TRUTH.h5 [DEG_PER_EPOCH|- [KAPPA]]   (`volrec
process --lowres` of a reconstruct.mode none configuration, and `volrec sim --truth`; with
DEG_PER_EPOCH the pose is the known rotation instead of the estimate: the oracle bound)."""
import sys

import numpy as np

from adaptive_proto import zbox
from quality_ref import current_linear, gain_db, per_epoch


def rot(th):
    c, s = np.cos(th), np.sin(th)
    return np.array([[c, -s], [s, c]])


class MotionCompensated:
    def __init__(self, ny, nx, Z, sx=5, sy=5, NB=8, sigma=0.45, rc=1.5, iters=6, ga=1.0,
                 gb=0.3, warm=5, search=(0, -0.5, 0.5, -1, 1, -2, 2, -3, 3, -4, 4, -6, 6),
                 oracle=None, kappa=0.0, kriging=True, ell=1.3, lam=0.1, M=20, R=2.0, H=2,
                 blur=0.8, exclude=4, nax=4, reset=3.0):
        self.ny, self.nx, self.Z, self.sx, self.sy = ny, nx, Z, sx, sy
        self.S, self.Y, self.X = sx * sy, ny * sy, nx * sx
        self.NB, self.sigma, self.rc, self.iters = NB, sigma, rc, iters
        self.ga, self.gb, self.warm, self.search, self.oracle = ga, gb, warm, search, oracle
        self.kappa = kappa  # > 0: blend with the newest epoch where the samples disagree
        self.kriging, self.ell, self.lam, self.M, self.R, self.H = kriging, ell, lam, M, R, H
        self.hist = []      # (phase, {pose, L}) of the last H * S epochs, oldest first
        self.blur = blur    # the registration's reference: the output's bands, this blurred,
        self.exclude = exclude  # and kriged without the newest `exclude` epochs
        self.ph = {}        # phase -> {pose, L}: the newest samples of each phase
        self.poses = []     # (theta rad, tx px, ty px, tz bins) of every epoch
        self.vel = np.zeros(4)
        self.prof = None    # previous epoch's mean A-scan
        self.profs = []     # (mean A-scan, axial pose) of the last epochs
        self.reset = reset  # residual factor that drops the history (0: never)
        self.clog = []      # the registration's residual per sample, since the last reset
        self.lost = False
        self.resets = []    # epochs where the history was dropped
        self.nax = nax      # 0: the first version's axial estimate (one epoch, +-4, filtered)
        self.Ob = None      # previous output's depth bands
        yy, xx = np.meshgrid(np.arange(self.Y) + 0.5 - self.Y / 2,
                             np.arange(self.X) + 0.5 - self.X / 2, indexing="ij")
        self.grid = np.stack([xx, yy], -1)   # centred lab coordinates of the columns

    def bands(self, V):
        return V.reshape(V.shape[:-1] + (self.NB, -1)).mean(-1)

    def node_pos(self, q, iy, ix):
        ox, oy = q % self.sx, q // self.sx
        return np.stack([ix * self.sx + ox + 0.5 - self.X / 2,
                         iy * self.sy + oy + 0.5 - self.Y / 2], -1)

    @staticmethod
    def map_to(P, pose_e, pose_E):
        """Lab position at epoch E of the tissue at lab position P at epoch e."""
        u = (P - pose_e[1:3]) @ rot(pose_e[0])
        return u @ rot(pose_E[0]).T + pose_E[1:3]

    @staticmethod
    def zshift(V, dz):
        """V[..., z - dz], linear in z, 0 outside: tissue moved down by dz bins."""
        if abs(dz) < 1e-9:
            return V
        Z = V.shape[-1]
        z = np.arange(Z) - dz
        z0 = np.floor(z).astype(int)
        t = z - z0
        a = np.take(V, np.clip(z0, 0, Z - 1), -1)
        b = np.take(V, np.clip(z0 + 1, 0, Z - 1), -1)
        return np.where((z0 >= 0) & (z0 + 1 < Z), a * (1 - t) + b * t, 0)

    def gather(self, pose, P=None, skip=None):
        """The history at lab points P (default: every column): Gaussian-weighted nearest
        node of each phase but `skip`."""
        w0 = np.exp(-self.rc ** 2 / (2 * self.sigma ** 2))
        num, den = 0, 0
        P = self.grid if P is None else P
        for q, h in self.ph.items():
            if q == skip:
                continue
            ox, oy = q % self.sx, q // self.sx
            PE = self.map_to(P, pose, h["pose"])
            gx, gy = PE[..., 0] + self.X / 2 - 0.5, PE[..., 1] + self.Y / 2 - 0.5
            ix = np.round((gx - ox) / self.sx).astype(int)
            iy = np.round((gy - oy) / self.sy).astype(int)
            inside = (ix >= 0) & (ix < self.nx) & (iy >= 0) & (iy < self.ny)
            ix, iy = np.clip(ix, 0, self.nx - 1), np.clip(iy, 0, self.ny - 1)
            dx, dy = gx - (ix * self.sx + ox), gy - (iy * self.sy + oy)
            w = np.maximum(np.exp(-(dx * dx + dy * dy) / (2 * self.sigma ** 2)) - w0, 0) * inside
            num = num + w[..., None] * self.zshift(h["L"][iy, ix], pose[3] - h["pose"][3])
            den = den + w
        return num, den

    def krige(self, pose, hist=None):
        """The output by ordinary kriging of the history (see the top), and the number of
        samples each column used."""
        P = self.grid.reshape(-1, 2)
        n = P.shape[0]
        cp, cd, cv = [], [], []
        for q, h in self.hist if hist is None else hist:
            ox, oy = q % self.sx, q // self.sx
            PE = self.map_to(P, pose, h["pose"])
            gx, gy = PE[:, 0] + self.X / 2 - 0.5, PE[:, 1] + self.Y / 2 - 0.5
            ix = np.clip(np.round((gx - ox) / self.sx).astype(int), 0, self.nx - 1)
            iy = np.clip(np.round((gy - oy) / self.sy).astype(int), 0, self.ny - 1)
            cur = self.map_to(self.node_pos(q, iy, ix), h["pose"], pose)
            cp.append(cur)
            cd.append(np.hypot(*(cur - P).T))
            cv.append(self.zshift(h["L"][iy, ix], pose[3] - h["pose"][3]))
        cp, cd, cv = np.stack(cp, 1), np.stack(cd, 1), np.stack(cv, 1)
        M = min(self.M, cp.shape[1])
        idx = np.argsort(cd, 1)[:, :M]
        sp = np.take_along_axis(cp, idx[..., None], 1)
        sd = np.take_along_axis(cd, idx, 1)
        sv = np.take_along_axis(cv, idx[..., None], 1)
        ok = sd < self.R
        corr = lambda d2: np.exp(-d2 / (2 * self.ell ** 2))  # noqa: E731
        K = corr(((sp[:, :, None] - sp[:, None]) ** 2).sum(-1)) + self.lam * np.eye(M)
        A = np.zeros((n, M + 1, M + 1))
        A[:, :M, :M] = np.where(ok[:, :, None] & ok[:, None], K, np.eye(M))
        A[:, :M, M] = A[:, M, :M] = ok
        A[~ok.any(1), M, M] = 1
        b = np.concatenate([np.where(ok, corr(sd ** 2), 0), np.ones((n, 1))], 1)
        w = np.where(ok, np.linalg.solve(A, b[..., None])[:, :M, 0], 0)
        out = np.einsum("nm,nmz->nz", w, sv).reshape(self.Y, self.X, -1)
        return out, ok.sum(1).reshape(self.Y, self.X)

    def blurred(self, O):
        """O (Y, X, NB) through a lateral Gaussian of sigma self.blur pitches (edges repeated)."""
        if not self.blur:
            return O
        r = int(np.ceil(3 * self.blur))
        k = np.exp(-np.arange(-r, r + 1) ** 2 / (2 * self.blur ** 2))
        k /= k.sum()
        p = np.pad(O, ((r, r), (r, r), (0, 0)), mode="edge")
        t = sum(k[i] * p[i:i + O.shape[0]] for i in range(2 * r + 1))
        return sum(k[i] * t[:, i:i + O.shape[1]] for i in range(2 * r + 1))

    def residual(self, Be, P, pose):
        PE = self.map_to(P, pose, self.poses[-1])
        gx, gy = PE[..., 0] + self.X / 2 - 0.5, PE[..., 1] + self.Y / 2 - 0.5
        x0, y0 = np.floor(gx).astype(int), np.floor(gy).astype(int)
        tx, ty = gx - x0, gy - y0
        ok = (x0 >= 0) & (x0 + 1 < self.X) & (y0 >= 0) & (y0 + 1 < self.Y)
        x0, y0 = np.clip(x0, 0, self.X - 2), np.clip(y0, 0, self.Y - 2)
        O = self.Ob
        pr = (O[y0, x0] * ((1 - tx) * (1 - ty))[..., None] + O[y0, x0 + 1] * (tx * (1 - ty))[..., None]
              + O[y0 + 1, x0] * ((1 - tx) * ty)[..., None] + O[y0 + 1, x0 + 1] * (tx * ty)[..., None])
        return np.where(ok[..., None], Be - pr, 0).ravel(), ok

    def zxcorr(self, a, b):
        """The shift (bins) of mean A-scan a against b: cross-correlation over +-6 bins (+-4
        with nax 0), parabolic peak."""
        Z, r = self.Z, 6 if self.nax else 4
        a, b = a - a.mean(), b - b.mean()
        cc = [np.sum(a[max(0, k):Z + min(0, k)] * b[max(0, -k):Z - max(0, k)])
              for k in range(-r, r + 1)]
        k = int(np.argmax(cc))
        d = k - float(r)
        if 0 < k < 2 * r and cc[k - 1] - 2 * cc[k] + cc[k + 1] < 0:
            d += 0.5 * (cc[k - 1] - cc[k + 1]) / (cc[k - 1] - 2 * cc[k] + cc[k + 1])
        return d

    def estimate(self, e, L, q):
        prof = L.mean((0, 1))
        if not self.poses:
            self.prof = prof
            return np.zeros(4)
        pose = self.poses[-1] + self.vel
        pred = pose.copy()
        # axial: the mean of the shifts against the last `nax` epochs' mean A-scans, unfiltered
        ests = [self.poses[-1][3] + self.zxcorr(prof, self.prof)]
        for p, tz in self.profs[-self.nax:-1] if self.nax > 1 else []:
            ests.append(tz + self.zxcorr(prof, p))
        dz = float(np.mean(ests)) - self.poses[-1][3]
        pose[3] = self.poses[-1][3] + dz
        self.prof = prof
        if len(self.ph) < self.warm:
            return pose
        Be = self.bands(self.zshift(L, -dz))
        P = self.node_pos(q, *np.meshgrid(np.arange(self.ny), np.arange(self.nx), indexing="ij"))
        best = None
        for dth in np.deg2rad(self.search):
            pp = pose.copy()
            pp[0] += dth
            r, ok = self.residual(Be, P, pp)
            c = (r @ r) / max(ok.sum(), 1)
            if best is None or c < best[0]:
                best = (c, pp)
        pose = best[1]
        r0, _ = self.residual(Be, P, pose)
        c0, lam = r0 @ r0, 1e-2
        for _ in range(self.iters):
            J = []
            for j, h in enumerate((1e-3, 1e-2, 1e-2)):
                pp = pose.copy()
                pp[j] += h
                J.append((self.residual(Be, P, pp)[0] - r0) / h)
            J = np.stack(J, 1)
            A, g = J.T @ J, J.T @ r0
            for _ in range(6):
                d = np.clip(-np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-9), g),
                            [-0.02, -1, -1], [0.02, 1, 1])
                pp = pose.copy()
                pp[:3] += d
                r1, _ = self.residual(Be, P, pp)
                c1 = r1 @ r1
                if c1 < c0:
                    break
                lam *= 10
            if c1 >= c0:
                break
            pose, r0, c0, lam = pp, r1, c1, max(lam / 10, 1e-4)
            if np.abs(d).max() < 1e-5:
                break
        # a registration that leaves `reset` times its usual residual: the pose chain is lost
        # (the patient moved at once): the history is dropped at this epoch
        _, ok = self.residual(Be, P, pose)
        cn = c0 / max(ok.sum(), 1)
        if self.reset and len(self.clog) > 5 and cn > self.reset * np.median(self.clog[-10:]):
            self.lost, self.clog = True, []
        self.clog.append(cn)
        inn = pose - pred
        self.vel = self.vel + self.gb * inn
        out = pred + self.ga * inn
        if self.nax:
            out[3], self.vel[3] = pose[3], 0.0  # the axial estimate as measured
        return out

    def step(self, e, L, off):
        ox, oy = off
        q = oy * self.sx + ox
        pose = np.array(self.oracle(e), float) if self.oracle else self.estimate(e, L, q)
        self.poses.append(pose)
        self.profs = (self.profs + [(L.mean((0, 1)), pose[3])])[-10:]
        D = None
        if self.kappa and self.ph:
            # the adaptive mode's change test, against the compensated history's prediction
            P = self.node_pos(q, *np.meshgrid(np.arange(self.ny), np.arange(self.nx),
                                              indexing="ij"))
            pn, pd = self.gather(pose, P, skip=q)
            b = zbox(L - pn / np.maximum(pd, 1e-12)[..., None], 9)
            d = np.where(pd > 0.05, np.mean(b * b, -1), 1e6)
            D = current_linear(d[..., None], ox, oy, self.sx, self.sy)[..., 0]
        if self.lost:
            self.ph, self.hist, self.vel, self.lost = {}, [], np.zeros(4), False
            self.resets.append(e)
        self.ph[q] = {"pose": pose.copy(), "L": L}
        self.hist = (self.hist + [(q, self.ph[q])])[-self.S * self.H:]
        C = current_linear(L, ox, oy, self.sx, self.sy)
        if self.kriging:
            out, used = self.krige(pose)
            out = np.where((used > 0)[..., None], out, C)
        else:
            num, den = self.gather(pose)
            out = (num + 1e-3 * C) / (den + 1e-3)[..., None]
        if D is not None:
            a = np.exp(-D / self.kappa ** 2)[..., None]
            out = a * out + (1 - a) * C
        ref = out
        if self.kriging and self.exclude and len(self.hist) > self.exclude + 5:
            ref, used = self.krige(pose, hist=self.hist[:-self.exclude])
            ref = np.where((used > 0)[..., None], ref, C)
        self.Ob = self.blurred(self.bands(ref))
        return out


def main():
    import h5py
    args = sys.argv[1:]
    nearest = "--nearest" in args
    args = [a for a in args if a != "--nearest"]
    opt = {}
    for name, kind in (("--blur", float), ("--exclude", int), ("--nax", int), ("--reset", float)):
        if name in args:
            i = args.index(name)
            opt[name[2:]] = kind(args[i + 1])
            del args[i:i + 2]
    sys.argv[1:] = args
    with h5py.File(sys.argv[2]) as f:
        T = f["truth"][:]
    with h5py.File(sys.argv[1]) as f:
        L, off = f["lowres"][:].astype(np.float64), f["offset"][:]
    db = (70, 100)
    n, ny, nx, Z = L.shape
    oracle = None
    if len(sys.argv) > 3 and sys.argv[3] != "-":
        dpe = float(sys.argv[3])
        oracle = lambda e: (np.deg2rad(dpe * e), 0, 0, 0)  # noqa: E731
    kappa = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    first = dict(kriging=False, H=1, ga=1.0, gb=0.3, blur=0, nax=0, reset=0) if nearest else dict(ga=0.5, gb=0.1)
    first.update(opt)
    m = MotionCompensated(ny, nx, Z, oracle=oracle, kappa=kappa, **first)
    O = np.stack([m.step(e, L[e], off[e]) for e in range(n)])
    r = per_epoch(np.clip(O, 0, 1), T, db, gain_db(L, off, T, db, 5, 5), first=25)
    dropped = f" (history dropped at epochs {m.resets})" if m.resets else ""
    print(f"motion-compensated: {np.mean([a for a, b in r]):.2f} dB / "
          f"{np.mean([b for a, b in r]):.3f}{dropped}")


if __name__ == "__main__":
    main()
