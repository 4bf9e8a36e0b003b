/* SPDX-License-Identifier: MIT */
/*
 * The solid phantoms of the synthetic scanner (docs/algorithms.md "The motion bench"): a
 * retina on a sphere, an anterior segment (cornea and iris) and skin, each defined at every
 * 3-D point of its own frame with a seeded shape and a 3-D lattice of scatterers, and their
 * motion: a rigid pose about all three axes (rotation, tilt, drift, bounce, jump, periodic)
 * and a local non-rigid warp. sim.c scans them and images their truth through the same
 * column, so the truth moves exactly as the scanned tissue does.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sources/sim_scene.h"

#define RETINA_NLAYER 10 /* NFL GCL IPL INL OPL ONL ELM IS/OS RPE choroid */
#define NVESSEL       3

enum sim_solid sim_solid_kind(const char *phantom)
{
	return strcmp(phantom, "curved") == 0     ? SIM_SOLID_CURVED
	       : strcmp(phantom, "anterior") == 0 ? SIM_SOLID_ANTERIOR
	       : strcmp(phantom, "skin") == 0     ? SIM_SOLID_SKIN
	       : strcmp(phantom, "flow") == 0     ? SIM_SOLID_FLOW
	                                          : SIM_SOLID_NONE;
}

static double motion_rate(const struct sim_params *p)
{
	return p->rate > 0 ? p->rate : SIM_DEFAULT_RATE;
}

int sim_scene_check(const struct sim_params *p, char *err, size_t errlen)
{
	const double nyq = motion_rate(p) / 2;
	bool tilt = p->tilt_deg_per_s[0] != 0 || p->tilt_deg_per_s[1] != 0;
	bool jtilt = p->jump_tilt_deg[0] != 0 || p->jump_tilt_deg[1] != 0;
	bool per = false;
	double all[] = {p->tilt_deg_per_s[0], p->tilt_deg_per_s[1], p->jump_tilt_deg[0],
	                p->jump_tilt_deg[1],  p->tilt_max_deg,      p->periodic_hz,
	                p->periodic_mm[0],    p->periodic_mm[1],    p->periodic_mm[2],
	                p->periodic_deg[0],   p->periodic_deg[1],   p->periodic_deg[2],
	                p->warp_mm,           p->warp_radius_mm,    p->warp_hz,
	                p->warp_centre_mm[0], p->warp_centre_mm[1]};

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (!isfinite(all[i]))
			return vr_err(err, errlen, -EINVAL,
			              "synth: motion tilt, periodic and warp parameters must be "
			              "finite");
	for (int i = 0; i < 3; i++)
		per = per || p->periodic_mm[i] != 0 || p->periodic_deg[i] != 0;
	if (sim_solid_kind(p->phantom) == SIM_SOLID_NONE && (tilt || jtilt || per || p->warp_mm))
		return vr_err(err, errlen, -EINVAL,
		              "synth: motion %s moves only the solid phantoms (curved, anterior, "
		              "skin, flow), not '%s'",
		              tilt    ? "tilt_deg_per_s"
		              : jtilt ? "jump.tilt_deg"
		              : per   ? "periodic"
		                      : "warp",
		              p->phantom);
	if (sim_solid_kind(p->phantom) == SIM_SOLID_FLOW) {
		if (!(p->wavelength_nm > 0) || !(p->ascan_period_us > 0))
			return vr_err(
			        err, errlen, -EINVAL,
			        "synth: phantom flow needs geometry.center_wavelength_nm (%g) "
			        "and geometry.ascan_period_us (%g) above 0: its Doppler phases "
			        "are made with them",
			        p->wavelength_nm, p->ascan_period_us);
		if (p->flow_direction != 1 && p->flow_direction != -1)
			return vr_err(
			        err, errlen, -EINVAL,
			        "synth: flow.direction %d (1: along the vessels, -1: against)",
			        p->flow_direction);
		if (!(p->flow_decor_um > 0) || !(p->flow_tau_us >= 0) ||
		    !isfinite(p->flow_peak_mm_s) || !isfinite(p->flow_bulk_um) ||
		    !isfinite(p->flow_tau_us) || !(p->refractive_index >= 0))
			return vr_err(
			        err, errlen, -EINVAL,
			        "synth: flow.decorrelation_um %g (> 0), flow.blood_tau_us %g "
			        "(>= 0), flow.peak_mm_per_s and flow.bulk_um_per_repeat must be "
			        "finite",
			        p->flow_decor_um, p->flow_tau_us);
	}
	if (tilt && !(p->tilt_max_deg > 0 && p->tilt_max_deg <= 30))
		return vr_err(err, errlen, -EINVAL,
		              "synth: motion tilt_max_deg %g out of range (tilts rock within "
		              "+-tilt_max_deg, (0, 30])",
		              p->tilt_max_deg);
	if (per && !(p->periodic_hz > 0))
		return vr_err(err, errlen, -EINVAL,
		              "synth: motion periodic has an amplitude but hz %g (needs > 0)",
		              p->periodic_hz);
	if (!per && p->periodic_hz != 0)
		return vr_err(
		        err, errlen, -EINVAL,
		        "synth: motion periodic.hz %g without an amplitude (periodic.shift_mm "
		        "or periodic.deg)",
		        p->periodic_hz);
	if (p->periodic_hz > nyq)
		return vr_err(
		        err, errlen, -EINVAL,
		        "synth: motion periodic.hz %g above half the motion clock (%g epochs/s): "
		        "the phantom is posed once per epoch",
		        p->periodic_hz, motion_rate(p));
	if (p->warp_mm != 0 && !(p->warp_radius_mm > 0))
		return vr_err(err, errlen, -EINVAL, "synth: motion warp.radius_mm %g (needs > 0)",
		              p->warp_radius_mm);
	if (p->warp_mm != 0 && fabs(p->warp_mm) > p->warp_radius_mm / 2)
		return vr_err(err, errlen, -EINVAL,
		              "synth: motion warp.mm %g more than half warp.radius_mm %g (the "
		              "tissue would fold)",
		              p->warp_mm, p->warp_radius_mm);
	if (p->warp_mm != 0 && !(p->warp_hz >= 0 && p->warp_hz <= nyq))
		return vr_err(
		        err, errlen, -EINVAL,
		        "synth: motion warp.hz %g out of range (0 for a fixed bump, up to half "
		        "the motion clock, %g)",
		        p->warp_hz, nyq);
	return 0;
}

void sim_scene_init(struct sim_scene *sc, const struct sim_params *p, double dz, uint32_t zlo,
                    uint32_t zhi, const float (*phasor)[2])
{
	sc->p = p;
	sc->kind = sim_solid_kind(p->phantom);
	sc->dz = dz;
	sc->zlo = zlo;
	sc->zhi = zhi;
	sc->phasor = phasor;
	for (int i = 0; i < 8; i++)
		sc->shape[i] =
		        (double)(sim_mix64(p->seed ^ (0x7368617065000000ull + (uint64_t)i)) >> 11) *
		        0x1p-53;
	sc->k_mm = sc->bulk_mm_s = sc->renew_per_mm = sc->renew_rest = 0;
	if (sc->kind == SIM_SOLID_FLOW) {
		double n = p->refractive_index > 0 ? p->refractive_index : SIM_FLOW_N;
		double tb = p->bscan_period_us > 0 ? p->bscan_period_us
		                                   : p->ascan_period_us * p->ascans_per_bscan;
		sc->k_mm = 4 * M_PI * n / (p->wavelength_nm * 1e-6);
		sc->bulk_mm_s = p->flow_bulk_um * 1e-3 / (tb * 1e-6);
		sc->renew_per_mm = 1 / (p->flow_decor_um * 1e-3);
		sc->renew_rest = p->flow_tau_us > 0 ? 1e6 / p->flow_tau_us : 0;
	}
}

/* Travel dist back and forth within [-lim, lim] from 0 (a triangle wave). */
static double bounce(double dist, double lim)
{
	double period = 4 * lim, u = fmod(fabs(dist), period);
	double v = u < lim ? u : u < 3 * lim ? 2 * lim - u : u - period;

	return dist < 0 ? -v : v;
}

void sim_pose_at(const struct sim_params *p, uint64_t epoch, struct sim_pose *q)
{
	const double t = (double)epoch / motion_rate(p), d2r = M_PI / 180;
	const bool jumped = p->jump_epoch > 0 && epoch >= p->jump_epoch;
	const double ps = sin(2 * M_PI * p->periodic_hz * t);
	double a[3]; /* about x, y, depth; radians */

	for (int i = 0; i < 2; i++)
		a[i] = (p->tilt_deg_per_s[i] != 0
		                ? bounce(p->tilt_deg_per_s[i] * t, p->tilt_max_deg)
		                : 0) +
		       (jumped ? p->jump_tilt_deg[i] : 0) + p->periodic_deg[i] * ps;
	a[2] = p->deg_per_s * t + (jumped ? p->jump_deg : 0) + p->periodic_deg[2] * ps;
	for (int i = 0; i < 3; i++)
		a[i] *= d2r;
	for (int i = 0; i < 2; i++)
		q->t[i] = p->shift_mm_per_s[i] * t + (jumped ? p->jump_mm[i] : 0) +
		          p->periodic_mm[i] * ps;
	q->t[2] = bounce(p->shift_mm_per_s[2] * t, SIM_AXIAL_MM) + (jumped ? p->jump_mm[2] : 0) +
	          p->periodic_mm[2] * ps;
	/* r = Rz(a2) Ry(a1) Rx(a0) */
	double cx = cos(a[0]), sx = sin(a[0]), cy = cos(a[1]), sy = sin(a[1]);
	double cz = cos(a[2]), sz = sin(a[2]);
	double r[3][3] = {
	        {cz * cy, cz * sy * sx - sz * cx, cz * sy * cx + sz * sx},
	        {sz * cy, sz * sy * sx + cz * cx, sz * sy * cx - cz * sx},
	        {-sy, cy * sx, cy * cx},
	};
	memcpy(q->r, r, sizeof(r));
	q->warp = p->warp_mm * (p->warp_hz > 0 ? sin(2 * M_PI * p->warp_hz * t) : 1);
	q->fkey = sim_mix64(epoch + 0x27d4eb2f165667c5ull);
	q->ts = 0;
}

/* ---- the anatomies: structure of a lateral position, reflectivity at a depth ------------- */

/* What does not change along depth at one lateral tissue position (X, Y). */
struct lateral {
	double X, Y;
	bool valid;
	double top[RETINA_NLAYER + 1]; /* boundaries of the layers, mm (kind-specific) */
	int nb;                        /* boundaries in top[] */
	double vtop[NVESSEL], vbot[NVESSEL];
	int nv;
	double mod; /* a lateral modulation of the reflectivity (iris crypts) */
	/* the scatterer cells under the beam */
	int ncell;
	uint64_t chash[SIM_BEAM_CELLS];
	float cw[SIM_BEAM_CELLS];
	double cx[SIM_BEAM_CELLS], cy[SIM_BEAM_CELLS]; /* the cells' centres (the flow phantom's) */
};

static const double retina_refl[RETINA_NLAYER] = {0.70, 0.16, 0.40, 0.07, 0.35,
                                                  0.03, 0.30, 0.80, 1.00, 0.35};

/* Retina on a sphere: the surface's vertex (deepest point) near the centre, radius of
 * curvature 9-12 mm, a foveal pit, three vessels in the ganglion cell layer. */
static void curved_structure(const struct sim_scene *sc, struct lateral *l)
{
	static const double inner[6] = {0.030, 0.045, 0.035, 0.035, 0.030, 0.085};
	static const double thin[6] = {0.95, 0.95, 0.90, 0.90, 0.85, -0.30};
	static const double outer[4] = {0.008, 0.030, 0.025, 0.180};
	static const struct {
		bool vertical;
		double c0, c1, c2, radius;
	} vessels[NVESSEL] = {
	        {false, 0.85, 0.12, -0.06, 0.040},
	        {false, -0.75, -0.10, 0.05, 0.032},
	        {true, -1.00, 0.05, 0.09, 0.028},
	};
	const double *u = sc->shape;
	double vx = 0.3 * (u[0] - 0.5), vy = 0.3 * (u[1] - 0.5), R = 9 + 3 * u[2];
	double rho2 = (l->X - vx) * (l->X - vx) + (l->Y - vy) * (l->Y - vy);
	double fx = l->X - vx - 0.15, fy = l->Y - vy + 0.1, f2 = fx * fx + fy * fy;
	double pit = exp(-f2 / (2 * 0.22 * 0.22));
	double elm = 0.78 + 0.26 - (R - sqrt(R * R - rho2));

	double d = elm;
	for (int i = 5; i >= 0; i--) {
		d -= inner[i] * (1 - thin[i] * pit);
		l->top[i] = d;
	}
	d = elm;
	for (int i = 6; i < RETINA_NLAYER; i++) {
		l->top[i] = d;
		d += outer[i - 6];
	}
	l->top[RETINA_NLAYER] = d;
	l->nb = RETINA_NLAYER + 1;
	l->nv = 0;
	if (f2 < 0.35 * 0.35)
		return; /* the foveal avascular zone */
	for (int v = 0; v < NVESSEL; v++) {
		double a = vessels[v].vertical ? l->Y : l->X, b = vessels[v].vertical ? l->X : l->Y;
		double f = vessels[v].c0 + vessels[v].c1 * a + vessels[v].c2 * a * a;
		double df = vessels[v].c1 + 2 * vessels[v].c2 * a;
		double dist = fabs(b - f) / sqrt(1 + df * df), r = vessels[v].radius;
		if (dist >= r)
			continue;
		double h = sqrt(r * r - dist * dist), mid = l->top[1] + r;
		l->vtop[l->nv] = mid - h;
		l->vbot[l->nv] = mid + h;
		l->nv++;
	}
}

static double curved_refl(const struct lateral *l, double Z, bool *blood)
{
	double r, shadow = 1;
	int i;

	if (Z < l->top[0] || Z >= l->top[RETINA_NLAYER])
		return 0;
	for (i = 0; i < RETINA_NLAYER - 1 && Z >= l->top[i + 1]; i++)
		;
	r = retina_refl[i];
	if (i == RETINA_NLAYER - 1)
		r *= exp(-(Z - l->top[i]) / 0.08);
	for (int v = 0; v < l->nv; v++) {
		if (Z >= l->vbot[v]) {
			shadow *= 0.2;
		} else if (Z >= l->vtop[v]) {
			r = Z < l->vtop[v] + 0.006 ? 0.85 : 0.20;
			*blood = Z >= l->vtop[v] + 0.006;
		}
	}
	return sqrt(r) * exp(-(Z - l->top[0]) / 1.2) * shadow;
}

/* Anterior segment, at a reduced scale that fits the depth range: a cornea (a shell of
 * radius 3.0-3.4 mm, 0.18 mm thick at its apex, thicker outwards: tear film, epithelium,
 * Bowman's layer, stroma with lamellae, endothelium) over an iris with a pupil. */
static void anterior_structure(const struct sim_scene *sc, struct lateral *l)
{
	const double *u = sc->shape;
	double Rc = 3.0 + 0.4 * u[0], rho2 = l->X * l->X + l->Y * l->Y;
	double ca = 0.60 + Rc - sqrt(Rc * Rc - (rho2 < 0.98 * Rc * Rc ? rho2 : 0.98 * Rc * Rc));
	double cp = ca + 0.18 + 0.03 * rho2;
	double px = 0.2 * (u[1] - 0.5), py = 0.2 * (u[2] - 0.5), pupil = 0.6 + 0.2 * u[3];
	double ix = l->X - px, iy = l->Y - py, ri = sqrt(ix * ix + iy * iy);

	l->top[0] = ca;
	l->top[1] = ca + 0.008; /* tear film and epithelial surface */
	l->top[2] = ca + 0.048; /* epithelium */
	l->top[3] = ca + 0.058; /* Bowman's layer */
	l->top[4] = cp - 0.010; /* stroma */
	l->top[5] = cp;         /* endothelium */
	l->nb = 6;
	l->nv = 0;
	if (ri > pupil) { /* the iris: anterior border, stroma, pigment epithelium */
		double it = 1.22 - 0.05 * (ri - pupil);
		l->top[6] = it;
		l->top[7] = it + 0.02;
		l->top[8] = it + 0.13;
		l->top[9] = it + 0.16;
		l->nb = 10;
		l->mod = 0.55 + 0.45 * cos(11 * atan2(iy, ix) + 6.2832 * u[4] + 9 * ri);
	}
}

static double anterior_refl(const struct lateral *l, double Z)
{
	static const double cornea[5] = {0.90, 0.12, 0.45, 0.06, 0.40};

	if (Z >= l->top[0] && Z < l->top[5]) {
		int i;
		for (i = 0; i < 4 && Z >= l->top[i + 1]; i++)
			;
		double r = cornea[i];
		if (i == 3) /* the stroma's lamellae */
			r *= 0.6 + 0.4 * cos(2 * M_PI * (Z - l->top[0]) / 0.012);
		return sqrt(r) * exp(-(Z - l->top[0]) / 2.0);
	}
	if (l->nb == 10 && Z >= l->top[6] && Z < l->top[9]) {
		double r = Z < l->top[7] ? 0.5 : Z < l->top[8] ? 0.25 * l->mod : 1.0;
		return sqrt(r) * exp(-(Z - l->top[6]) / 0.15);
	}
	return 0;
}

/* Skin: a rough surface (four seeded waves and a furrow), stratum corneum, viable epidermis
 * down to a junction with rete ridges, dermis of fibres and a vessel, attenuating fast. */
static void skin_structure(const struct sim_scene *sc, struct lateral *l)
{
	const double *u = sc->shape;
	double zs = 0.66, X = l->X, Y = l->Y;

	for (int k = 0; k < 4; k++) {
		double f = 1.5 + 2.5 * k + u[k], a = 2 * M_PI * u[(k + 4) & 7] + k;
		zs += 0.012 *
		      sin(2 * M_PI * f * (X * cos(a) + Y * sin(a)) + 6.2832 * u[(k + 2) & 7]);
	}
	double fa = M_PI * u[5], fw = cos(2 * M_PI * (X * cos(fa) + Y * sin(fa)) / 1.1);
	zs += 0.05 * pow(fw > 0 ? fw : 0, 12); /* a furrow */
	l->top[0] = zs;
	l->top[1] = zs + 0.006; /* the surface's entrance reflection */
	l->top[2] = zs + 0.018; /* stratum corneum */
	l->top[3] = zs + 0.085 +
	            0.022 * sin(2 * M_PI * X / 0.17 + 6.2832 * u[6]) *
	                    sin(2 * M_PI * Y / 0.17 + 6.2832 * u[7]); /* epidermis */
	l->top[4] = l->top[3] + 0.012;                                /* dermo-epidermal junction */
	l->nb = 5;
	/* a dermal vessel along a seeded direction, 0.3 mm under the surface */
	double va = M_PI * u[3], dist = fabs(-X * sin(va) + Y * cos(va) - 0.3 * (u[2] - 0.5));
	l->nv = 0;
	if (dist < 0.035) {
		double h = sqrt(0.035 * 0.035 - dist * dist), mid = zs + 0.30;
		l->vtop[0] = mid - h;
		l->vbot[0] = mid + h;
		l->nv = 1;
	}
}

static double skin_refl(const struct lateral *l, double X, double Y, double Z, bool *blood)
{
	static const double epi[4] = {0.85, 0.35, 0.10, 0.50};
	double r, shadow = 1;

	if (Z < l->top[0])
		return 0;
	if (Z < l->top[4]) {
		int i;
		for (i = 0; i < 3 && Z >= l->top[i + 1]; i++)
			;
		r = epi[i];
	} else { /* dermis: collagen fibres */
		double fib = sin(2 * M_PI * (X / 0.09 + Z / 0.05)) *
		             sin(2 * M_PI * (Y / 0.07 - Z / 0.04));
		r = 0.30 * (0.6 + 0.4 * fib);
	}
	if (l->nv && Z >= l->vbot[0]) {
		shadow = 0.4;
	} else if (l->nv && Z >= l->vtop[0]) {
		r = 0.15;
		*blood = true;
	}
	return sqrt(r) * exp(-(Z - l->top[0]) / 0.35) * shadow;
}

/* The scatterer cells under a beam centred at (X, Y) (sim.c's model, in the tissue's frame). */
static void lateral_cells(const struct sim_scene *sc, struct lateral *l)
{
	const struct sim_params *p = sc->p;
	double fw = p->beam_um * 1e-3, cell = fw / 3, rmax = 1.2 * fw, sum2 = 0;

	l->ncell = 0;
	if (!(p->beam_um > 0)) {
		int64_t ix = (int64_t)floor(l->X / SIM_CELL_XY_MM),
		        iy = (int64_t)floor(l->Y / SIM_CELL_XY_MM);
		l->chash[0] = sim_cell_hash(p->seed, ix, iy);
		l->cw[0] = 1;
		l->cx[0] = (ix + 0.5) * SIM_CELL_XY_MM;
		l->cy[0] = (iy + 0.5) * SIM_CELL_XY_MM;
		l->ncell = 1;
		return;
	}
	int64_t x0 = (int64_t)floor((l->X - rmax) / cell),
	        x1 = (int64_t)floor((l->X + rmax) / cell);
	int64_t y0 = (int64_t)floor((l->Y - rmax) / cell),
	        y1 = (int64_t)floor((l->Y + rmax) / cell);
	for (int64_t iy = y0; iy <= y1; iy++) {
		for (int64_t ix = x0; ix <= x1; ix++) {
			double ddx = (ix + 0.5) * cell - l->X, ddy = (iy + 0.5) * cell - l->Y;
			double r2 = ddx * ddx + ddy * ddy;
			if (r2 > rmax * rmax || l->ncell == SIM_BEAM_CELLS)
				continue;
			double w = exp(-2 * M_LN2 * r2 / (fw * fw));
			l->chash[l->ncell] = sim_cell_hash(p->seed, ix, iy);
			l->cw[l->ncell] = (float)w;
			l->cx[l->ncell] = (ix + 0.5) * cell;
			l->cy[l->ncell] = (iy + 0.5) * cell;
			sum2 += w * w;
			l->ncell++;
		}
	}
	for (int i = 0; i < l->ncell; i++)
		l->cw[i] = (float)(l->cw[i] / sqrt(sum2));
}

/* The flow phantom (docs/algorithms.md "The flow phantom"): a slab of static tissue under a
 * gently waving surface, crossed by three straight vessels at different depths and angles, each
 * a wall FLOW_WALL_MM thick around a lumen of blood in laminar flow. A vessel: a point on its
 * axis (x, y, depth; mm), the axis's azimuth in the lateral plane from +x towards +y and its
 * elevation (positive: deeper along the direction), both in degrees, and its outer radius. */
_Static_assert(SIM_FLOW_NVESSEL <= NVESSEL, "a lateral holds every flow vessel");
#define FLOW_WALL_MM 0.006
#define FLOW_BOT_MM  1.44
static const struct {
	double c[3], azim_deg, elev_deg, radius;
} flow_vessels[SIM_FLOW_NVESSEL] = {
        {{0.00, -0.70, 0.95}, 0, 8, 0.075},
        {{0.60, 0.00, 1.05}, 90, -12, 0.065},
        {{-0.50, 0.50, 1.15}, 45, 6, 0.055},
};

static void flow_dir(int v, double d[3])
{
	double a = flow_vessels[v].azim_deg * (M_PI / 180),
	       e = flow_vessels[v].elev_deg * (M_PI / 180);

	d[0] = cos(e) * cos(a);
	d[1] = cos(e) * sin(a);
	d[2] = sin(e);
}

/* Squared distance of P from vessel v's axis. */
static double flow_rho2(int v, const double P[3])
{
	double d[3], w[3], wd = 0, w2 = 0;

	flow_dir(v, d);
	for (int i = 0; i < 3; i++) {
		w[i] = P[i] - flow_vessels[v].c[i];
		wd += w[i] * d[i];
		w2 += w[i] * w[i];
	}
	return w2 - wd * wd;
}

static void flow_structure(const struct sim_scene *sc, struct lateral *l)
{
	const double *u = sc->shape;

	l->top[0] = 0.60 + 0.015 * sin(2 * M_PI * (l->X / 1.3 + u[0])) *
	                           cos(2 * M_PI * (l->Y / 1.7 + u[1]));
	l->top[1] = l->top[0] + 0.006; /* the surface's entrance reflection */
	l->top[2] = FLOW_BOT_MM;
	l->nb = 3;
	/* where the vertical line through (X, Y) crosses each vessel's outer cylinder:
	 * rho2(Z) = a Z^2 + b Z + c = radius^2 */
	l->nv = SIM_FLOW_NVESSEL;
	for (int v = 0; v < SIM_FLOW_NVESSEL; v++) {
		double d[3], w0[3] = {l->X - flow_vessels[v].c[0], l->Y - flow_vessels[v].c[1],
		                      -flow_vessels[v].c[2]};
		flow_dir(v, d);
		double wd = w0[0] * d[0] + w0[1] * d[1] + w0[2] * d[2];
		double a = 1 - d[2] * d[2], b = 2 * (w0[2] - wd * d[2]);
		double c = w0[0] * w0[0] + w0[1] * w0[1] + w0[2] * w0[2] - wd * wd;
		double r = flow_vessels[v].radius, disc = b * b - 4 * a * (c - r * r);
		l->vtop[v] = l->vbot[v] = HUGE_VAL;
		if (disc > 0) {
			l->vtop[v] = (-b - sqrt(disc)) / (2 * a);
			l->vbot[v] = (-b + sqrt(disc)) / (2 * a);
		}
	}
}

/* Blood's signed speed along vessel v at P: the laminar profile, 0 outside the lumen. */
static double flow_speed(const struct sim_scene *sc, int v, const double P[3])
{
	double rl = flow_vessels[v].radius - FLOW_WALL_MM, f = 1 - flow_rho2(v, P) / (rl * rl);

	return f > 0 ? sc->p->flow_direction * sc->p->flow_peak_mm_s * f : 0;
}

/* The flow phantom's amplitude at phantom point P; *blood where P is in a lumen, with *speed
 * the signed speed along vessel *vessel's direction. */
static double flow_refl(const struct sim_scene *sc, const struct lateral *l, const double P[3],
                        bool *blood, double *speed, int *vessel)
{
	const double Z = P[2];
	double r = 0, shadow = 1;

	if (Z >= l->top[0] && Z < l->top[2])
		r = Z < l->top[1] ? 0.80
		                  : 0.50 * (0.8 + 0.2 * sin(2 * M_PI * (P[0] / 0.11 + Z / 0.07)) *
		                                          sin(2 * M_PI * (P[1] / 0.13 - Z / 0.05)));
	for (int v = 0; v < l->nv; v++) {
		if (Z >= l->vbot[v]) {
			shadow *= 0.7; /* blood attenuates the light under it */
		} else if (Z >= l->vtop[v]) {
			double rl = flow_vessels[v].radius - FLOW_WALL_MM, rho2 = flow_rho2(v, P);
			r = 0.60; /* the vessel's wall */
			if (rho2 < rl * rl) {
				r = 0.15; /* blood, dimmer than the tissue */
				*blood = true;
				*vessel = v;
				*speed = flow_speed(sc, v, P);
			}
		}
	}
	double att = Z > l->top[0] ? exp(-(Z - l->top[0]) / 2.0) : 1;
	return sqrt(r) * att * shadow;
}

/* The phantom point of lab (x, y, Z) in pose q (sim_scene_column's transform). */
static void flow_phantom_point(const struct sim_scene *sc, const struct sim_pose *q, double x,
                               double y, double Z, double P[3])
{
	const struct sim_params *p = sc->p;
	double L[3] = {x - q->t[0], y - q->t[1], Z - SIM_CENTRE_MM - q->t[2]};

	for (int i = 0; i < 3; i++)
		P[i] = q->r[0][i] * L[0] + q->r[1][i] * L[1] + q->r[2][i] * L[2];
	P[2] += SIM_CENTRE_MM;
	if (q->warp != 0) {
		const double wr = p->warp_radius_mm;
		double ex = P[0] - p->warp_centre_mm[0], ey = P[1] - p->warp_centre_mm[1];
		double g = q->warp * exp(-(ex * ex + ey * ey) / (2 * wr * wr));
		P[0] -= 0.5 * g * ex / wr;
		P[1] -= 0.5 * g * ey / wr;
		P[2] -= g;
	}
}

/* The lab axial velocity (mm/s) of blood moving at speed along vessel v in pose q. */
static double flow_vz(const struct sim_pose *q, int v, double speed)
{
	double d[3];

	flow_dir(v, d);
	return speed * (q->r[2][0] * d[0] + q->r[2][1] * d[1] + q->r[2][2] * d[2]);
}

int sim_scene_flow_point(const struct sim_scene *sc, const struct sim_pose *q, double x, double y,
                         double Z, float *vz)
{
	struct lateral l;
	double P[3], speed = 0;
	bool blood = false;
	int v = 0;

	*vz = 0;
	flow_phantom_point(sc, q, x, y, Z, P);
	l.X = P[0];
	l.Y = P[1];
	flow_structure(sc, &l);
	if (!(flow_refl(sc, &l, P, &blood, &speed, &v) > 0))
		return 0;
	if (!blood)
		return 1;
	*vz = (float)flow_vz(q, v, speed);
	return 2;
}

/* One column of the flow phantom at time q->ts of its position: tissue still (its speckle
 * fixed), blood's scatterers renewed at random times at a rate that grows with their speed,
 * every scatterer's phase turned by its axial displacement since t = 0 (k_mm per mm; blood's
 * own, each cell's at its own place, and the bulk motion). */
static void flow_column(const struct sim_scene *sc, const struct sim_pose *q, double x, double y,
                        float *out)
{
	struct lateral l;

	l.valid = false;
	for (uint32_t z = sc->zlo; z <= sc->zhi; z++) {
		float *o = out + 2 * (size_t)(z - sc->zlo);
		double P[3], speed = 0;
		bool blood = false;
		int v = 0;

		o[0] = o[1] = 0;
		flow_phantom_point(sc, q, x, y, z * sc->dz, P);
		if (!l.valid || P[0] != l.X || P[1] != l.Y) {
			l.X = P[0];
			l.Y = P[1];
			l.valid = true;
			l.mod = 1;
			flow_structure(sc, &l);
			lateral_cells(sc, &l);
		}
		double a = flow_refl(sc, &l, P, &blood, &speed, &v);
		if (!(a > 0) || P[2] <= 0)
			continue;
		int64_t iz = (int64_t)(P[2] * (1 / SIM_CELL_Z_MM));
		double sr = 0, si = 0;
		for (int i = 0; i < l.ncell; i++) {
			uint32_t ph;
			uint64_t h = l.chash[i];
			double c = 1, sn = 0;
			if (blood) {
				/* this epoch's blood in this cell, moving at the speed of the cell's
				 * own place: renewed at random times of its rate, its phase turned
				 * by its own axial displacement (consistent between the A-scans and
				 * repeats that see the cell) */
				double Pc[3] = {l.cx[i], l.cy[i], P[2]};
				double sp = flow_speed(sc, v, Pc);
				double gen = q->ts * (fabs(sp) * sc->renew_per_mm + sc->renew_rest);
				h = sim_mix64(h ^ q->fkey);
				double u0 = (double)(sim_mix64(h ^ ((uint64_t)iz *
				                                    0x94d049bb133111ebull)) >>
				                     11) *
				            0x1p-53;
				uint64_t g = (uint64_t)floor(u0 + gen);
				if (g)
					h = sim_mix64(h ^ sim_mix64(g * 0x9e3779b97f4a7c15ull +
					                            0x72656e6577000000ull));
				double ang = sc->k_mm * flow_vz(q, v, sp) * q->ts;
				c = cos(ang);
				sn = sin(ang);
			}
			double m = l.cw[i] * sim_cell_speckle(h, iz, &ph);
			double re = m * sc->phasor[ph][0], im = m * sc->phasor[ph][1];
			sr += re * c - im * sn;
			si += re * sn + im * c;
		}
		double ang = sc->k_mm * sc->bulk_mm_s * q->ts, c = cos(ang), s = sin(ang);
		o[0] = (float)(a * (sr * c - si * s));
		o[1] = (float)(a * (sr * s + si * c));
	}
}

void sim_scene_column(const struct sim_scene *sc, const struct sim_pose *q, double x, double y,
                      float *out)
{
	const struct sim_params *p = sc->p;
	const double wr = p->warp_radius_mm, wcx = p->warp_centre_mm[0], wcy = p->warp_centre_mm[1];
	struct lateral l;

	if (sc->kind == SIM_SOLID_FLOW) {
		flow_column(sc, q, x, y, out);
		return;
	}
	l.valid = false;
	for (uint32_t z = sc->zlo; z <= sc->zhi; z++) {
		float *o = out + 2 * (size_t)(z - sc->zlo);
		/* the phantom point of lab (x, y, z dz): r^T (L - c - t) + c */
		double L[3] = {x - q->t[0], y - q->t[1], z * sc->dz - SIM_CENTRE_MM - q->t[2]};
		double P[3];
		for (int i = 0; i < 3; i++)
			P[i] = q->r[0][i] * L[0] + q->r[1][i] * L[1] + q->r[2][i] * L[2];
		P[2] += SIM_CENTRE_MM;
		if (q->warp != 0) { /* the tissue at P is P - w(P) */
			double ex = P[0] - wcx, ey = P[1] - wcy;
			double g = q->warp * exp(-(ex * ex + ey * ey) / (2 * wr * wr));
			P[0] -= 0.5 * g * ex / wr;
			P[1] -= 0.5 * g * ey / wr;
			P[2] -= g;
		}
		o[0] = o[1] = 0;
		if (!l.valid || P[0] != l.X || P[1] != l.Y) {
			l.X = P[0];
			l.Y = P[1];
			l.valid = true;
			l.mod = 1;
			if (sc->kind == SIM_SOLID_CURVED)
				curved_structure(sc, &l);
			else if (sc->kind == SIM_SOLID_ANTERIOR)
				anterior_structure(sc, &l);
			else
				skin_structure(sc, &l);
			lateral_cells(sc, &l);
		}
		bool blood = false;
		double a = sc->kind == SIM_SOLID_CURVED ? curved_refl(&l, P[2], &blood)
		           : sc->kind == SIM_SOLID_ANTERIOR
		                   ? anterior_refl(&l, P[2])
		                   : skin_refl(&l, P[0], P[1], P[2], &blood);
		if (!(a > 0) || P[2] <= 0)
			continue;
		int64_t iz = (int64_t)(P[2] * (1 / SIM_CELL_Z_MM)); /* P[2] > 0: floor */
		double sr = 0, si = 0;
		for (int i = 0; i < l.ncell; i++) {
			uint32_t ph;
			uint64_t h = blood ? sim_mix64(l.chash[i] ^ q->fkey) : l.chash[i];
			double m = l.cw[i] * sim_cell_speckle(h, iz, &ph);
			sr += m * sc->phasor[ph][0];
			si += m * sc->phasor[ph][1];
		}
		o[0] = (float)(a * sr);
		o[1] = (float)(a * si);
	}
}
