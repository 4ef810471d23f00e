/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * statefile.c -- the prior register values, so that every change can be undone.
 *
 *   {"version": 1, "ports": [{"root_port": "0000:00:01.0", "vendor": "0x8086",
 *     "device": "0x2030", "offset": "0x180", "value": "0x000001d1",
 *     "mask": "0x00000088", "time": 1700000000, "recorded": "2023-11-14T22:13:20Z"}]}
 *
 * Only the first change of a port is recorded: a later one must not make
 * "restore" return to an intermediate state.  The file is replaced
 * atomically and durably, under a lock, before the register is written.
 */
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define STATE_VERSION 1

static int
lock_state(const char *path)
{
	char lock[PATH_MAX];
	int fd;

	if (snprintf(lock, sizeof(lock), "%s.lock", path) >= (int)sizeof(lock))
		return ddio__err(-ENAMETOOLONG, "state file path too long: %s", path);
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		int e = errno;
		return ddio__err(-e, "cannot open %s: %s", lock, strerror(e));
	}
	if (flock(fd, LOCK_EX)) {
		int e = errno;
		close(fd);
		return ddio__err(-e, "cannot lock %s: %s", lock, strerror(e));
	}
	return fd;
}

static void
unlock_state(int fd)
{
	close(fd); /* drops the flock */
}

/* mkdir -p of path's directory. */
static int
make_parent(const char *path)
{
	char dir[PATH_MAX];
	char *s;

	snprintf(dir, sizeof(dir), "%s", path);
	s = strrchr(dir, '/');
	if (!s || s == dir)
		return 0;
	*s = '\0';
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(dir, 0755) && errno != EEXIST)
			return ddio__err(-errno, "cannot create %s: %s", dir, strerror(errno));
		*p = '/';
	}
	if (mkdir(dir, 0755) && errno != EEXIST)
		return ddio__err(-errno, "cannot create %s: %s", dir, strerror(errno));
	return 0;
}

static int
fsync_parent(const char *path)
{
	char dir[PATH_MAX];
	char *s;
	int fd, ret = 0;

	snprintf(dir, sizeof(dir), "%s", path);
	s = strrchr(dir, '/');
	if (!s)
		snprintf(dir, sizeof(dir), ".");
	else if (s == dir)
		dir[1] = '\0';
	else
		*s = '\0';
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd))
		ret = ddio__err(-errno, "cannot fsync %s: %s", dir, strerror(errno));
	if (fd >= 0)
		close(fd);
	return ret;
}

/* Reads and checks the file; *root NULL and 0 when there is none. */
static int
read_state(const char *path, json_object **root)
{
	json_object *ports, *ver;

	*root = NULL;
	if (access(path, F_OK)) {
		if (errno == ENOENT)
			return 0;
		return ddio__err(-errno, "cannot access %s: %s", path, strerror(errno));
	}
	*root = json_object_from_file(path);
	if (!*root)
		return ddio__err(DDIO_E_STATE, "state file %s is not valid JSON: %s", path,
				json_util_get_last_err() ? json_util_get_last_err() : "?");
	if (!json_object_is_type(*root, json_type_object) ||
	    !json_object_object_get_ex(*root, "version", &ver) ||
	    json_object_get_int(ver) != STATE_VERSION ||
	    !json_object_object_get_ex(*root, "ports", &ports) ||
	    !json_object_is_type(ports, json_type_array)) {
		json_object_put(*root);
		*root = NULL;
		return ddio__err(DDIO_E_STATE, "state file %s is not a version %d ddio state file",
				path, STATE_VERSION);
	}
	return 0;
}

static int
write_state(const char *path, json_object *root)
{
	char tmp[PATH_MAX];
	const char *text;
	size_t len;
	int fd, ret = 0;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return ddio__err(-ENAMETOOLONG, "state file path too long: %s", path);
	text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
			JSON_C_TO_STRING_NOSLASHESCAPE);
	len = strlen(text);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return ddio__err(-errno, "cannot create %s: %s", tmp, strerror(errno));
	for (size_t off = 0; off < len;) {
		ssize_t w = write(fd, text + off, len - off);
		if (w < 0) {
			ret = ddio__err(-errno, "cannot write %s: %s", tmp, strerror(errno));
			break;
		}
		off += (size_t)w;
	}
	if (!ret && (write(fd, "\n", 1) != 1 || fsync(fd)))
		ret = ddio__err(-errno, "cannot write %s: %s", tmp, strerror(errno));
	close(fd);
	if (!ret && rename(tmp, path))
		ret = ddio__err(-errno, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
	if (ret) {
		unlink(tmp);
		return ret;
	}
	return fsync_parent(path);
}

static int
get_hex(json_object *o, const char *key, uint64_t max, uint64_t *v)
{
	json_object *f;
	const char *s;
	char *end;

	if (!json_object_object_get_ex(o, key, &f))
		return -1;
	if (json_object_is_type(f, json_type_int)) {
		int64_t i = json_object_get_int64(f);
		if (i < 0 || (uint64_t)i > max)
			return -1;
		*v = (uint64_t)i;
		return 0;
	}
	if (!json_object_is_type(f, json_type_string))
		return -1;
	s = json_object_get_string(f);
	errno = 0;
	*v = strtoull(s, &end, 0);
	return (errno || end == s || *end || *v > max) ? -1 : 0;
}

static int
parse_entry(json_object *o, struct ddio_saved *s)
{
	json_object *f;
	uint64_t v;

	memset(s, 0, sizeof(*s));
	if (!json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, "root_port", &f) || !json_object_is_type(f, json_type_string) ||
	    strlen(json_object_get_string(f)) >= sizeof(s->port))
		return -1;
	snprintf(s->port, sizeof(s->port), "%s", json_object_get_string(f));
	if (get_hex(o, "vendor", 0xffff, &v)) return -1;
	s->vendor = (uint16_t)v;
	if (get_hex(o, "device", 0xffff, &v)) return -1;
	s->device = (uint16_t)v;
	if (get_hex(o, "offset", 0xfff, &v)) return -1;
	s->offset = (unsigned)v;
	if (get_hex(o, "value", 0xffffffffu, &v)) return -1;
	s->value = (uint32_t)v;
	if (get_hex(o, "mask", 0xffffffffu, &v)) return -1;
	s->mask = (uint32_t)v;
	if (json_object_object_get_ex(o, "time", &f))
		s->time = json_object_get_int64(f);
	return 0;
}

static json_object *
hex_string(uint32_t v, int width)
{
	char buf[16];

	snprintf(buf, sizeof(buf), "0x%0*x", width, v);
	return json_object_new_string(buf);
}

static int
find_port(json_object *ports, const char *port)
{
	size_t n = json_object_array_length(ports);

	for (size_t i = 0; i < n; i++) {
		json_object *f;
		if (json_object_object_get_ex(json_object_array_get_idx(ports, i), "root_port", &f) &&
		    strcmp(json_object_get_string(f), port) == 0)
			return (int)i;
	}
	return -1;
}

int
ddio_state_record(const char *path, const struct ddio_port *p, const struct ddio_change *c)
{
	json_object *root = NULL, *ports, *e;
	char when[32];
	time_t t = time(NULL);
	struct tm tm;
	int fd, ret;

	if (!path || !p || !c)
		return ddio__err(-EINVAL, "ddio_state_record: NULL argument");
	if (strcmp(c->port, p->bdf) != 0)
		return ddio__err(-EINVAL, "the change is for %s, not %s", c->port, p->bdf);
	if ((ret = make_parent(path)))
		return ret;
	if ((fd = lock_state(path)) < 0)
		return fd;
	if ((ret = read_state(path, &root)))
		goto out;
	if (!root) {
		root = json_object_new_object();
		json_object_object_add(root, "version", json_object_new_int(STATE_VERSION));
		json_object_object_add(root, "ports", json_object_new_array());
	}
	json_object_object_get_ex(root, "ports", &ports);
	if (find_port(ports, p->bdf) >= 0)
		goto out; /* the first prior value stays */
	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	e = json_object_new_object();
	json_object_object_add(e, "root_port", json_object_new_string(p->bdf));
	json_object_object_add(e, "vendor", hex_string(p->vendor, 4));
	json_object_object_add(e, "device", hex_string(p->device, 4));
	json_object_object_add(e, "offset", hex_string(c->offset, 3));
	json_object_object_add(e, "value", hex_string(c->before, 8));
	json_object_object_add(e, "mask", hex_string(DDIO_BITS, 8));
	json_object_object_add(e, "time", json_object_new_int64((int64_t)t));
	json_object_object_add(e, "recorded", json_object_new_string(when));
	json_object_array_add(ports, e);
	ret = write_state(path, root);
out:
	json_object_put(root);
	unlock_state(fd);
	return ret;
}

int
ddio_state_load(const char *path, struct ddio_saved **out, size_t *n)
{
	json_object *root, *ports;
	struct ddio_saved *v;
	size_t len;
	int fd, ret;

	if (!path || !out || !n)
		return ddio__err(-EINVAL, "ddio_state_load: NULL argument");
	if (access(path, F_OK) && errno == ENOENT)
		return ddio__err(-ENOENT, "no state file %s: nothing was changed", path);
	if ((fd = lock_state(path)) < 0)
		return fd;
	ret = read_state(path, &root);
	unlock_state(fd);
	if (ret)
		return ret;
	if (!root)
		return ddio__err(-ENOENT, "no state file %s: nothing was changed", path);
	json_object_object_get_ex(root, "ports", &ports);
	len = json_object_array_length(ports);
	v = calloc(len ? len : 1, sizeof(*v));
	if (!v) {
		json_object_put(root);
		return ddio__err(-ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < len; i++)
		if (parse_entry(json_object_array_get_idx(ports, i), &v[i])) {
			json_object_put(root);
			free(v);
			return ddio__err(DDIO_E_STATE, "state file %s: entry %zu is malformed", path, i);
		}
	json_object_put(root);
	*out = v;
	*n = len;
	return 0;
}

int
ddio_state_forget(const char *path, const char *port)
{
	json_object *root, *ports;
	int fd, ret, idx;

	if (!path || !port)
		return ddio__err(-EINVAL, "ddio_state_forget: NULL argument");
	if ((fd = lock_state(path)) < 0)
		return fd;
	if ((ret = read_state(path, &root)))
		goto out;
	if (!root) {
		ret = ddio__err(-ENOENT, "no state file %s", path);
		goto out;
	}
	json_object_object_get_ex(root, "ports", &ports);
	idx = find_port(ports, port);
	if (idx < 0) {
		ret = ddio__err(-ENOENT, "state file %s has no record of %s", path, port);
	} else {
		json_object_array_del_idx(ports, (size_t)idx, 1);
		if (json_object_array_length(ports) > 0) {
			ret = write_state(path, root);
		} else if (unlink(path)) {
			ret = ddio__err(-errno, "cannot remove %s: %s", path, strerror(errno));
		} else {
			ret = fsync_parent(path);
		}
	}
	json_object_put(root);
out:
	unlock_state(fd);
	return ret;
}
