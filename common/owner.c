/* SPDX-License-Identifier: BSD-3-Clause */
/* owner.c -- who owns a file, and where a link points, in words (see owner.h). */
#include <pwd.h>
#include <stdio.h>
#include <unistd.h>

#include "owner.h"

void
owner_describe(uid_t uid, char *buf, size_t len)
{
	struct passwd pw, *found = NULL;
	char names[1024];

	/* Reentrant: the libraries run on several threads. */
	if (getpwuid_r(uid, &pw, names, sizeof(names), &found) == 0 && found)
		snprintf(buf, len, "%s (uid %u)", found->pw_name, (unsigned)uid);
	else
		snprintf(buf, len, "uid %u", (unsigned)uid);
}

void
owner_link_describe(const char *path, char *buf, size_t len)
{
	char target[256];
	ssize_t n = readlink(path, target, sizeof(target) - 1);

	target[n > 0 ? n : 0] = '\0';
	snprintf(buf, len, "a symbolic link%s%s", n > 0 ? " to " : "", target);
}
