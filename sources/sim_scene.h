/* SPDX-License-Identifier: MIT */
/*
 * The synthetic scanner's solid phantoms and their motions (sim_scene.c), inside the sim
 * archive: anatomies defined at every 3-D point of their own frame (a retina on a sphere, an
 * anterior segment, skin), posed at each epoch by a rigid motion about all three axes and a
 * local non-rigid warp; plus the hashes the scanner's speckle is made of, shared with sim.c.
 */
#ifndef VOLREC_SIM_SCENE_H
#define VOLREC_SIM_SCENE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sources/sim.h"

#define SIM_NPHASOR    1024  /* speckle phases are quantized to this many steps */
#define SIM_CENTRE_MM  1.0   /* depth of the solid phantoms' centre of rotation */
#define SIM_CELL_XY_MM 0.006 /* lateral scatterer cell (pencil beam) */
#define SIM_CELL_Z_MM  0.003 /* axial scatterer cell */
#define SIM_BEAM_CELLS 96    /* most scatterer cells one beam sums (beam_um > 0) */

static inline uint64_t sim_mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t sim_cell_hash(uint64_t seed, int64_t ix, int64_t iy)
{
	return sim_mix64(seed ^ sim_mix64((uint64_t)ix * 0x9e3779b97f4a7c15ull) ^
	                 sim_mix64((uint64_t)iy * 0xc2b2ae3d27d4eb4full + 0x165667b19e3779f9ull));
}

/* One scatterer cell's speckle at axial cell iz: magnitude in [0.25, 1) and phase index. */
static inline double sim_cell_speckle(uint64_t h, int64_t iz, uint32_t *phase)
{
	uint64_t k = sim_mix64(h ^ ((uint64_t)iz * 0xd6e8feb86659fd93ull));

	*phase = (uint32_t)(k & (SIM_NPHASOR - 1));
	return 0.25 + 0.75 * (double)(k >> 40) * (1.0 / 16777216.0);
}

enum sim_solid {
	SIM_SOLID_NONE = 0,
	SIM_SOLID_CURVED,
	SIM_SOLID_ANTERIOR,
	SIM_SOLID_SKIN,
	SIM_SOLID_FLOW
};

#define SIM_FLOW_NVESSEL 3
#define SIM_FLOW_N       1.38 /* the refractive index when geometry.refractive_index is 0 */

/* A solid phantom: its kind, its seeded shape and what it is scanned with. */
struct sim_scene {
	const struct sim_params *p;
	enum sim_solid kind;
	double dz;         /* mm per depth bin */
	uint32_t zlo, zhi; /* the bins that may hold tissue */
	const float (*phasor)[2];
	double shape[8]; /* seeded shape parameters of the anatomy, each uniform in [0, 1) */
	/* "flow": the phase of an axial displacement (rad per mm), the bulk motion (mm/s) and
	 * blood's renewals per second per mm/s of speed and at rest */
	double k_mm, bulk_mm_s, renew_per_mm, renew_rest;
};

/* The phantom's pose at one epoch: lab = r (P - c) + c + t for a phantom point P, c the centre
 * (0, 0, SIM_CENTRE_MM); the tissue shown at P is P - w(P) (the warp, amplitude warp). */
struct sim_pose {
	double r[3][3];
	double t[3];
	double warp;   /* signed peak displacement now, mm */
	uint64_t fkey; /* blood's speckle key of the epoch */
	double ts;     /* "flow": seconds since the position's first A-scan (repeat 0, A-scan 0) */
};

/* The "flow" phantom's truth at lab (x, y, depth Z mm) in pose q: 0 no sample, 1 static
 * tissue, 2 blood; *vz the blood's axial velocity in mm/s (+: deeper; 0 elsewhere). */
int sim_scene_flow_point(const struct sim_scene *sc, const struct sim_pose *q, double x, double y,
                         double Z, float *vz);

/* SIM_SOLID_NONE for the 2.5-D phantoms (retina, mirror, tilted, blocked). */
enum sim_solid sim_solid_kind(const char *phantom);
/* The motions' parameters and whether the phantom can take them: -EINVAL and a message that
 * names the key, 0 when fine. */
int sim_scene_check(const struct sim_params *p, char *err, size_t errlen);
void sim_scene_init(struct sim_scene *sc, const struct sim_params *p, double dz, uint32_t zlo,
                    uint32_t zhi, const float (*phasor)[2]);
/* The pose at `epoch` (the motion clock: epoch / rate seconds). */
void sim_pose_at(const struct sim_params *p, uint64_t epoch, struct sim_pose *q);
/* The complex reflectivity of the column at lab (x, y) at depth bins zlo..zhi into
 * out[2 * (z - zlo)] (re, im). */
void sim_scene_column(const struct sim_scene *sc, const struct sim_pose *q, double x, double y,
                      float *out);

#endif
