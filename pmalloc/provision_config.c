/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * provision_config.c -- the desired state: namespaces described by calls,
 * by a small config file, or by command-line statements of the same
 * syntax:
 *
 *   namespace NAME [region=R] [numa=N] [size=S|all] [align=2M|1G] [count=K] [dev=NS]
 *   init-labels REGION|all
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pmalloc_ns.h"
#include "errmsg.h"
#include "ns_internal.h"

#define MAX_COUNT 1024
#define MAX_FILE (1 << 20)

struct entry {
	struct pma_prov_ns ns; /* points into the copies below */
	char *name, *region, *dev;
};

struct pma_prov_spec {
	struct entry *e;
	size_t n, cap;
	char **init;   /* regions allowed to get labels */
	size_t ninit;
	int init_all;
};

int
pma_prov_spec_new(struct pma_prov_spec **out)
{
	if (!out)
		return pma_ns__err(-EINVAL, "pma_prov_spec_new: out is required");
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : pma_ns__err(-ENOMEM, "out of memory");
}

void
pma_prov_spec_free(struct pma_prov_spec **sp)
{
	struct pma_prov_spec *s = sp ? *sp : NULL;

	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free(s->e[i].name);
		free(s->e[i].region);
		free(s->e[i].dev);
	}
	for (size_t i = 0; i < s->ninit; i++)
		free(s->init[i]);
	free(s->init);
	free(s->e);
	free(s);
	*sp = NULL;
}

size_t pma_prov_spec_count(const struct pma_prov_spec *s) { return s ? s->n : 0; }

const struct pma_prov_ns *
pma_prov_spec_get(const struct pma_prov_spec *s, size_t i)
{
	return s && i < s->n ? &s->e[i].ns : NULL;
}

int
pma_ns__spec_init_allowed(const struct pma_prov_spec *s, const char *r)
{
	if (s->init_all)
		return 1;
	for (size_t i = 0; r && i < s->ninit; i++)
		if (strcmp(s->init[i], r) == 0)
			return 1;
	return 0;
}

int
pma_prov_spec_allow_init_labels(struct pma_prov_spec *s, const char *region)
{
	if (!s)
		return pma_ns__err(-EINVAL, "pma_prov_spec_allow_init_labels: spec is required");
	if (!region || strcmp(region, "all") == 0) {
		s->init_all = 1;
		return 0;
	}
	char **n = realloc(s->init, (s->ninit + 1) * sizeof(*n));
	if (!n)
		return pma_ns__err(-ENOMEM, "out of memory");
	s->init = n;
	if (!(s->init[s->ninit] = strdup(region)))
		return pma_ns__err(-ENOMEM, "out of memory");
	s->ninit++;
	return 0;
}

static int
valid_name(const char *name)
{
	size_t len = strlen(name);

	if (len == 0 || len >= PMA_NS_NAME_MAX)
		return 0;
	for (const char *p = name; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' && *p != '-')
			return 0;
	return 1;
}

static int
valid_token(const char *v)
{
	if (!v || !*v)
		return 0;
	for (const char *p = v; *p; p++)
		if (isspace((unsigned char)*p) || !isprint((unsigned char)*p))
			return 0;
	return 1;
}

int
pma_prov_spec_add(struct pma_prov_spec *s, const struct pma_prov_ns *ns)
{
	char buf[32];

	if (!s || !ns)
		return pma_ns__err(-EINVAL, "pma_prov_spec_add: spec and namespace are required");
	const char *label = ns->name ? ns->name : ns->dev ? ns->dev : "?";
	if (!ns->name && !ns->dev)
		return pma_ns__err(-EINVAL,
				"a namespace needs a name (or dev= to take over an existing one)");
	if (ns->name && !valid_name(ns->name))
		return pma_ns__err(-EINVAL, "bad namespace name '%s': 1 to %d characters of "
				"A-Z a-z 0-9 . _ -", ns->name, PMA_NS_NAME_MAX - 1);
	if (ns->region && !valid_token(ns->region))
		return pma_ns__err(-EINVAL, "%s: bad region '%s'", label, ns->region);
	if (ns->dev && !valid_token(ns->dev))
		return pma_ns__err(-EINVAL, "%s: bad device '%s'", label, ns->dev);
	if (ns->numa_node < -1)
		return pma_ns__err(-EINVAL, "%s: bad NUMA node %d", label, ns->numa_node);
	uint64_t align = ns->align ? ns->align : PMA_NS_ALIGN_2M;
	if (align != PMA_NS_ALIGN_2M && align != PMA_NS_ALIGN_1G)
		return pma_ns__err(-EINVAL, "%s: alignment %s not supported: devdax namespaces "
				"here are 2M (default) or 1G aligned", label,
				pma_size_format(align, buf, sizeof(buf)));
	if (ns->size && ns->size < PMA_NS_MIN_SIZE)
		return pma_ns__err(-EINVAL, "%s: size %s is below the kernel's minimum of 16 MiB",
				label, pma_size_format(ns->size, buf, sizeof(buf)));
	if (ns->size % align)
		return pma_ns__err(-EINVAL, "%s: size %llu is not a multiple of the alignment (%s)",
				label, (unsigned long long)ns->size,
				pma_size_format(align, buf, sizeof(buf)));
	if (ns->size && ns->dev)
		return pma_ns__err(-EINVAL, "%s: dev= takes over %s whole: give no size", label, ns->dev);
	for (size_t i = 0; i < s->n; i++) {
		if (ns->name && s->e[i].name && strcmp(s->e[i].name, ns->name) == 0)
			return pma_ns__err(-EINVAL, "namespace name '%s' is described twice", ns->name);
		if (ns->dev && s->e[i].dev && strcmp(s->e[i].dev, ns->dev) == 0)
			return pma_ns__err(-EINVAL, "device '%s' is described twice", ns->dev);
	}
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 8;
		struct entry *e = realloc(s->e, cap * sizeof(*e));
		if (!e)
			return pma_ns__err(-ENOMEM, "out of memory");
		s->e = e;
		s->cap = cap;
	}
	struct entry *e = &s->e[s->n];
	memset(e, 0, sizeof(*e));
	e->name = ns->name ? strdup(ns->name) : NULL;
	e->region = ns->region ? strdup(ns->region) : NULL;
	e->dev = ns->dev ? strdup(ns->dev) : NULL;
	if ((ns->name && !e->name) || (ns->region && !e->region) || (ns->dev && !e->dev)) {
		free(e->name);
		free(e->region);
		free(e->dev);
		return pma_ns__err(-ENOMEM, "out of memory");
	}
	e->ns = *ns;
	e->ns.name = e->name;
	e->ns.region = e->region;
	e->ns.dev = e->dev;
	e->ns.align = align;
	s->n++;
	return 0;
}

/* "ckpt%d" with i: "ckpt3".  -EINVAL unless exactly one %d and no other '%'. */
static int
expand_name(const char *pattern, int i, char *out, size_t len)
{
	const char *pct = strchr(pattern, '%');

	if (!pct) {
		snprintf(out, len, "%s", pattern);
		return 0;
	}
	if (pct[1] != 'd' || strchr(pct + 2, '%'))
		return -EINVAL;
	int n = snprintf(out, len, "%.*s%d%s", (int)(pct - pattern), pattern, i, pct + 2);
	return n < 0 || (size_t)n >= len ? -EINVAL : 0;
}

/* Prefixes the current message with ctx ("file:3: ", or "" for none). */
static int
prefixed(int rc, const char *ctx)
{
	size_t n = strlen(ctx);

	if (n < 2)
		return rc;
	return pma_ns__err_prefix(rc, "%.*s", (int)(n - 2), ctx);
}

/* Parses statement `line` (already without comment); ctx is "file:3: " or "". */
static int
parse_statement(struct pma_prov_spec *s, char *line, const char *ctx)
{
	char *save = NULL;
	char *kw = strtok_r(line, " \t\r\n", &save);

	if (!kw)
		return 0;
	if (strcmp(kw, "init-labels") == 0) {
		char *r = strtok_r(NULL, " \t\r\n", &save);
		if (!r || strtok_r(NULL, " \t\r\n", &save))
			return pma_ns__err(-EINVAL, "%sinit-labels takes one region (or all)", ctx);
		int rc = pma_prov_spec_allow_init_labels(s, r);
		return rc ? prefixed(rc, ctx) : 0;
	}
	if (strcmp(kw, "namespace") != 0)
		return pma_ns__err(-EINVAL, "%sunknown statement '%s' (namespace or init-labels)",
				ctx, kw);

	struct pma_prov_ns ns = {.numa_node = -1};
	long count = 1;
	int have_count = 0;
	char *tok;
	while ((tok = strtok_r(NULL, " \t\r\n", &save))) {
		char *eq = strchr(tok, '=');
		if (!eq) {
			if (ns.name)
				return pma_ns__err(-EINVAL,
						"%stwo names: '%s' and '%s' (key=value expected)",
						ctx, ns.name, tok);
			ns.name = tok;
			continue;
		}
		*eq = '\0';
		const char *key = tok, *val = eq + 1;
		if (!*val)
			return pma_ns__err(-EINVAL, "%s%s= needs a value", ctx, key);
		if (strcmp(key, "name") == 0) {
			if (ns.name)
				return pma_ns__err(-EINVAL, "%stwo names: '%s' and '%s'", ctx, ns.name, val);
			ns.name = val;
		} else if (strcmp(key, "region") == 0) {
			ns.region = val;
		} else if (strcmp(key, "dev") == 0) {
			ns.dev = val;
		} else if (strcmp(key, "numa") == 0) {
			char *end;
			long n = strtol(val, &end, 10);
			if (strcmp(val, "any") == 0)
				n = -1;
			else if (*end || n < 0 || n > 65535)
				return pma_ns__err(-EINVAL, "%snuma=%s: a node number (or any)", ctx, val);
			ns.numa_node = (int)n;
		} else if (strcmp(key, "size") == 0) {
			if (strcmp(val, "all") == 0) {
				ns.size = 0;
			} else {
				int rc = pma_size_parse(val, &ns.size);
				if (rc)
					return prefixed(rc, ctx);
				if (ns.size == 0)
					return pma_ns__err(-EINVAL, "%ssize=0: write size=all for "
							"all free capacity", ctx);
			}
		} else if (strcmp(key, "align") == 0) {
			int rc = pma_size_parse(val, &ns.align);
			if (rc)
				return prefixed(rc, ctx);
			if (ns.align == 0)
				return pma_ns__err(-EINVAL, "%salign=0 is not an alignment", ctx);
		} else if (strcmp(key, "count") == 0) {
			char *end;
			count = strtol(val, &end, 10);
			if (*end || count < 1 || count > MAX_COUNT)
				return pma_ns__err(-EINVAL, "%scount=%s: 1 to %d", ctx, val, MAX_COUNT);
			have_count = 1;
		} else {
			return pma_ns__err(-EINVAL, "%sunknown key '%s' (region, numa, size, align, "
					"count, dev, name)", ctx, key);
		}
	}
	if (ns.name && strchr(ns.name, '%') && !have_count)
		return pma_ns__err(-EINVAL, "%sname '%s' has %%d but no count=", ctx, ns.name);
	if (count > 1 && (!ns.name || !strchr(ns.name, '%')))
		return pma_ns__err(-EINVAL, "%scount=%ld needs a name with %%d (like ckpt%%d)",
				ctx, count);
	if (count > 1 && ns.dev)
		return pma_ns__err(-EINVAL, "%sdev= names one namespace: no count=", ctx);
	const char *pattern = ns.name;
	for (long i = 0; i < count; i++) {
		char name[PMA_NS_NAME_MAX + 16];
		if (pattern) {
			if (expand_name(pattern, (int)i, name, sizeof(name)))
				return pma_ns__err(-EINVAL, "%sname '%s': one %%d and no other %%", ctx,
						pattern);
			ns.name = name;
		}
		int rc = pma_prov_spec_add(s, &ns);
		if (rc)
			return prefixed(rc, ctx);
	}
	return 0;
}

/* "file:3: ", "line 3: " or "": the start of a message about a line. */
static void
make_ctx(char *ctx, size_t len, const char *origin, unsigned line)
{
	if (origin && line)
		snprintf(ctx, len, "%s:%u: ", origin, line);
	else if (line)
		snprintf(ctx, len, "line %u: ", line);
	else
		ctx[0] = '\0';
}

int
pma_prov_spec_add_line(struct pma_prov_spec *s, const char *line)
{
	if (!s || !line)
		return pma_ns__err(-EINVAL, "pma_prov_spec_add_line: spec and line are required");
	char *copy = strdup(line);
	if (!copy)
		return pma_ns__err(-ENOMEM, "out of memory");
	copy[strcspn(copy, "#")] = '\0';
	/* A bare "NAME key=val" from a command line means a namespace. */
	char *p = copy + strspn(copy, " \t");
	int rc;
	if (strncmp(p, "namespace", 9) == 0 && (p[9] == '\0' || isspace((unsigned char)p[9])))
		rc = parse_statement(s, copy, "");
	else if (strncmp(p, "init-labels", 11) == 0 &&
			(p[11] == '\0' || isspace((unsigned char)p[11])))
		rc = parse_statement(s, copy, "");
	else {
		size_t n = strlen(p) + 16;
		char *full = malloc(n);
		if (!full) {
			free(copy);
			return pma_ns__err(-ENOMEM, "out of memory");
		}
		snprintf(full, n, "namespace %s", p);
		rc = parse_statement(s, full, "");
		free(full);
	}
	free(copy);
	return rc;
}

int
pma_prov_spec_parse(const char *text, const char *origin, struct pma_prov_spec **out)
{
	struct pma_prov_spec *s = NULL;
	char ctx[256];
	unsigned lineno = 0;
	int rc;

	if (!text || !out)
		return pma_ns__err(-EINVAL, "pma_prov_spec_parse: text and out are required");
	*out = NULL;
	rc = pma_prov_spec_new(&s);
	if (rc)
		return rc;
	const char *p = text;
	while (*p && !rc) {
		size_t len = strcspn(p, "\n");
		char *line = strndup(p, len);
		lineno++;
		if (!line) {
			rc = pma_ns__err(-ENOMEM, "out of memory");
			break;
		}
		line[strcspn(line, "#")] = '\0';
		make_ctx(ctx, sizeof(ctx), origin, lineno);
		rc = parse_statement(s, line, ctx);
		free(line);
		p += len;
		if (*p == '\n')
			p++;
	}
	if (rc) {
		pma_prov_spec_free(&s);
		return rc;
	}
	*out = s;
	return 0;
}

int
pma_prov_spec_load(const char *path, struct pma_prov_spec **out)
{
	if (!path || !out)
		return pma_ns__err(-EINVAL, "pma_prov_spec_load: path and out are required");
	*out = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return pma_ns__err(-errno, "open %s: %s", path, strerror(errno));
	char *buf = malloc(MAX_FILE + 1);
	if (!buf) {
		close(fd);
		return pma_ns__err(-ENOMEM, "out of memory");
	}
	size_t len = 0;
	for (;;) {
		ssize_t n = read(fd, buf + len, MAX_FILE + 1 - len);
		if (n < 0) {
			int e = errno;
			free(buf);
			close(fd);
			return pma_ns__err(-e, "read %s: %s", path, strerror(e));
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > MAX_FILE) {
			free(buf);
			close(fd);
			return pma_ns__err(-EINVAL, "%s: larger than %d bytes: not a provisioning "
					"description", path, MAX_FILE);
		}
	}
	close(fd);
	buf[len] = '\0';
	if (memchr(buf, '\0', len)) {
		free(buf);
		return pma_ns__err(-EINVAL, "%s: binary data: not a provisioning description", path);
	}
	int rc = pma_prov_spec_parse(buf, path, out);
	free(buf);
	return rc;
}
