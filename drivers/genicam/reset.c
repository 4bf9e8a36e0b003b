/* SPDX-License-Identifier: MIT */
/*
 * A known camera state at open (docs/cameras.md): the camera's default user set where it has
 * one, else the values the shim's features replaced, put back in reverse order at close and,
 * after a crash, from the undo file at the next open.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "drivers/genicam/internal.h"

/* Whether node is an available, implemented feature (writable too when writable is set). */
static bool usable(ArvGcNode *node, bool writable)
{
	ArvGcFeatureNode *fn;
	GError *ge = NULL;
	bool ok;

	if (!node || !ARV_IS_GC_FEATURE_NODE(node))
		return false;
	fn = ARV_GC_FEATURE_NODE(node);
	ok = arv_gc_feature_node_is_implemented(fn, &ge) && !ge &&
	     arv_gc_feature_node_is_available(fn, &ge) && !ge;
	g_clear_error(&ge);
	if (ok && writable)
		ok = arv_gc_feature_node_get_actual_access_mode(fn) != ARV_GC_ACCESS_MODE_RO &&
		     !arv_gc_feature_node_is_locked(fn, NULL);
	return ok;
}

/* Whether the camera offers UserSetSelector's entry "Default" and the UserSetLoad command. */
static bool has_default_user_set(ArvDevice *dev)
{
	ArvGcNode *sel = arv_device_get_feature(dev, "UserSetSelector");
	ArvGcNode *load = arv_device_get_feature(dev, "UserSetLoad");
	GError *ge = NULL;
	const char **vals;
	guint n = 0;
	bool found = false;

	if (!usable(sel, true) || !ARV_IS_GC_ENUMERATION(sel) || !usable(load, true) ||
	    !ARV_IS_GC_COMMAND(load))
		return false;
	vals = arv_gc_enumeration_dup_available_string_values(ARV_GC_ENUMERATION(sel), &n, &ge);
	for (guint i = 0; vals && i < n && !ge; i++)
		found |= strcmp(vals[i], "Default") == 0;
	g_free(vals);
	g_clear_error(&ge);
	return found;
}

/*
 * Write value into feature key, as a string: 0; -EINVAL when the camera refuses the value (the
 * feature is not writable now, the value not valid: skipped, as a camera of another firmware
 * may); -EIO when the camera did not answer or refused the access (a late camera, another
 * controller), after PUT_BACK_TRIES writes, with the reason in msg.
 */
#define PUT_BACK_TRIES 3
static int put_back(ArvDevice *dev, const char *key, const char *value, char *msg, size_t msglen)
{
	ArvGcNode *node = arv_device_get_feature(dev, key);

	if (!usable(node, true))
		return -EINVAL;
	for (int t = 0; t < PUT_BACK_TRIES; t++) {
		GError *ge = NULL;
		bool device;

		arv_gc_feature_node_set_value_from_string(ARV_GC_FEATURE_NODE(node), value, &ge);
		if (!ge)
			return 0;
		device = ge->domain == ARV_DEVICE_ERROR;
		snprintf(msg, msglen, "%s", ge->message);
		g_clear_error(&ge);
		if (!device)
			return -EINVAL;
	}
	return -EIO;
}

static void undo_clear(struct gc_undo *u)
{
	for (size_t i = 0; i < u->n; i++) {
		g_free(u->e[i].key);
		g_free(u->e[i].val);
	}
	g_free(u->e);
	u->e = NULL;
	u->n = 0;
}

/*
 * Put back the undo file's values in reverse order, then remove the file. A value the camera
 * refuses now is skipped; one it could not be reached for (-EIO) keeps the file for the next
 * open, which tries again, and the error names it.
 */
static int undo_file_replay(ArvDevice *dev, const char *camera_id, const char *path, char *err,
                            size_t errlen)
{
	gchar *text = NULL, **lines;
	gsize len = 0;
	int rc = 0;

	if (!g_file_get_contents(path, &text, &len, NULL))
		return 0;
	lines = g_strsplit(text, "\n", -1);
	for (gint i = (gint)g_strv_length(lines) - 1; i >= 0; i--) {
		char *tab = strchr(lines[i], '\t'), why[256] = "";
		gchar *key, *val;

		if (!tab)
			continue; /* the last line, or one cut by the crash */
		*tab = '\0';
		key = g_strcompress(lines[i]);
		val = g_strcompress(tab + 1);
		if (put_back(dev, key, val, why, sizeof(why)) == -EIO && !rc)
			rc = vr_err(
			        err, errlen, -EIO,
			        "camera %s: putting back %s = %s, which a run that did not close "
			        "the camera left, failed: %s (%s is kept: the next open tries "
			        "again)",
			        camera_id, key, val, why, path);
		g_free(key);
		g_free(val);
	}
	g_strfreev(lines);
	g_free(text);
	if (!rc)
		unlink(path);
	return rc;
}

int gc_camera_reset(ArvCamera *camera, const char *camera_id, const char *state_dir,
                    struct gc_undo *u, char *err, size_t errlen)
{
	ArvDevice *dev = arv_camera_get_device(camera);
	GError *ge = NULL;
	int rc = 0;

	memset(u, 0, sizeof(*u));
	u->fd = -1;
	/* an acquisition a run that did not close the camera left running (killed, crashed):
	 * stopped first, so that its stream, triggers and rate are set afresh. A camera that is
	 * not acquiring may refuse the command: that changes nothing. */
	arv_camera_stop_acquisition(camera, &ge);
	g_clear_error(&ge);
	if (state_dir && *state_dir) {
		char name[128];
		size_t k = 0;

		for (const char *c = camera_id; *c && k + 1 < sizeof(name); c++)
			name[k++] = g_ascii_isalnum(*c) || strchr("._-", *c) ? *c : '_';
		name[k] = '\0';
		if ((size_t)snprintf(u->path, sizeof(u->path), "%s/genicam-%s.undo", state_dir,
		                     name) >= sizeof(u->path))
			return vr_err(err, errlen, -ENAMETOOLONG,
			              "shim.args.state_dir: %s is too long", state_dir);
	}
	if (has_default_user_set(dev)) {
		arv_device_set_string_feature_value(dev, "UserSetSelector", "Default", &ge);
		if (!ge)
			arv_device_execute_command(dev, "UserSetLoad", &ge);
		if (ge) {
			rc = vr_err(
			        err, errlen, -EIO,
			        "camera %s: loading its default user set (UserSetSelector "
			        "Default, UserSetLoad) failed: %s (shim.args.reset: none skips it)",
			        camera_id, ge->message);
			g_clear_error(&ge);
			return rc;
		}
		u->user_set = true;
		if (u->path[0])
			unlink(u->path); /* the user set covers what a crashed run left */
		return 0;
	}
	if (u->path[0]) {
		rc = undo_file_replay(dev, camera_id, u->path, err, errlen);
		if (rc)
			return rc;
		u->fd = open(u->path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
		if (u->fd < 0)
			return vr_err(
			        err, errlen, -errno,
			        "shim.args.state_dir: cannot write %s: %s (it keeps the camera "
			        "values to put back after a crash)",
			        u->path, strerror(errno));
	}
	u->active = true;
	return 0;
}

int gc_undo_remember(ArvDevice *dev, struct gc_undo *u, const char *key)
{
	ArvGcNode *node = arv_device_get_feature(dev, key);
	struct gc_undo_entry *e;
	GError *ge = NULL;
	const char *now;

	if (!u->active || !usable(node, false))
		return 0; /* nothing to put back: gc_feature_apply says why it cannot write it */
	now = arv_gc_feature_node_get_value_as_string(ARV_GC_FEATURE_NODE(node), &ge);
	if (ge || !now) {
		g_clear_error(&ge);
		return 0; /* not readable (a write-only feature): it cannot be put back */
	}
	e = g_try_renew(struct gc_undo_entry, u->e, u->n + 1);
	if (!e)
		return -ENOMEM;
	u->e = e;
	e = &u->e[u->n++];
	e->key = g_strdup(key);
	e->val = g_strdup(now);
	if (u->fd >= 0) {
		gchar *k = g_strescape(key, NULL), *v = g_strescape(now, NULL);
		gchar *line = g_strdup_printf("%s\t%s\n", k, v);
		size_t len = strlen(line);
		ssize_t n = write(u->fd, line, len);

		g_free(k);
		g_free(v);
		g_free(line);
		if (n != (ssize_t)len)
			return n < 0 ? -errno : -EIO;
	}
	return 0;
}

void gc_undo_finish(ArvCamera *camera, struct gc_undo *u, bool reachable)
{
	if (u->fd >= 0)
		close(u->fd);
	u->fd = -1;
	if (u->active && reachable) {
		ArvDevice *dev = arv_camera_get_device(camera);

		bool kept = false;
		char why[256];

		for (size_t i = u->n; i-- > 0;)
			kept |= put_back(dev, u->e[i].key, u->e[i].val, why, sizeof(why)) == -EIO;
		/* a value the camera could not be reached for: the file stays for the next open */
		if (u->path[0] && !kept)
			unlink(u->path);
	}
	/* unreachable: the file stays for the next open to put back */
	undo_clear(u);
	u->active = false;
}
