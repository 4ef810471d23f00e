/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * quarantine.c -- damaged complete steps of a shared directory are moved
 * aside, never deleted:
 *
 *   DIR/quarantine/step-<12 digits>-<UTC time>[-k]/   the step as it was
 *       NOTE          what failed, when, and who moved it
 *
 * Only a recovery that found the damage (a rank's file of a complete step
 * missing, truncated or failing its checksums) moves a step, and it does
 * so once no rank reads it any more (pmck_global_recover: rank 0 after the
 * group loaded an older step).  "quarantine" is not a step name
 * (pmck__list_steps), so retention and recovery never see what is in it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define NOTE "NOTE"

int
pmck__file_check(const char *dir, uint64_t step, unsigned rank, char *why, size_t len)
{
	char leaf[64], path[PATH_MAX];
	struct stat st;

	snprintf(leaf, sizeof(leaf), "rank-%05u.safetensors", rank);
	if (pmck__step_path(path, sizeof(path), dir, step, leaf)) {
		snprintf(why, len, "%s", pmck_errormsg());
		return -1;
	}
	int ret = stat(path, &st) ? -errno : pmck_safetensors_verify(path, NULL);
	if (ret == 0)
		return 0;
	if (ret == -ENOENT)
		snprintf(why, len, "%s is missing from the complete step", leaf);
	else
		snprintf(why, len, "shared file %s", pmck_errormsg());
	/* Cannot be read now (-EACCES, -EIO, -ENOMEM): not known to be damaged. */
	return ret == -ENOENT || ret == PMCK_E_CORRUPT ? 1 : -1;
}

size_t
pmck__quarantine_count(const char *dir)
{
	char path[PATH_MAX];
	size_t n = 0;
	struct dirent *de;

	if (!dir)
		return 0;
	snprintf(path, sizeof(path), "%s/" PMCK_QUARANTINE, dir);
	DIR *d = opendir(path);
	while (d && (de = readdir(d)))
		n += !strncmp(de->d_name, "step-", 5);
	if (d)
		closedir(d);
	return n;
}

int
pmck__quarantine_step(const char *dir, uint64_t step, const char *what, char *moved, size_t len)
{
	char src[PATH_MAX], qdir[PATH_MAX], dst[PATH_MAX + 64], when[32], host[64] = "?";
	char text[PMCK_REASON_MAX + PATH_MAX + 256];
	struct stat st;
	struct tm tm;
	time_t now = time(NULL);
	int ret;

	if ((ret = pmck__step_path(src, sizeof(src), dir, step, NULL)))
		return ret;
	if (stat(src, &st))
		return pma__err(-errno, "quarantine %s: %s", src, strerror(errno));
	snprintf(qdir, sizeof(qdir), "%s/" PMCK_QUARANTINE, dir);
	/*
	 * 0700 whatever the copier's mode: recovery takes no options, and a
	 * quarantined step is for its owner to look at.  A link named
	 * quarantine is not followed (lstat): the step is not moved through it.
	 */
	if (mkdir(qdir, PMCK__MODE_DIR(0)) == 0) {
		if ((ret = pmck__fsync_dir(dir))) /* DIR/quarantine exists durably */
			return ret;
	} else if (errno != EEXIST) {
		return pma__err(-errno, "mkdir %s: %s", qdir, strerror(errno));
	} else if (lstat(qdir, &st) || !S_ISDIR(st.st_mode)) {
		return pma__err(-ENOTDIR, "quarantine %s: %s is not a directory", src, qdir);
	}

	gmtime_r(&now, &tm);
	strftime(when, sizeof(when), "%Y%m%dT%H%M%SZ", &tm);
	gethostname(host, sizeof(host) - 1);
	snprintf(text, sizeof(text), "step %" PRIu64 " of %s was moved here by pmckpt recovery\n"
			"when: %s\nby: pid %ld on %s\nwhat failed: %s\n",
			step, dir, when, (long)getpid(), host, what);
	/* The NOTE goes first: a crash before the rename leaves a step that is found damaged again. */
	if ((ret = pmck__write_file_durably(src, NOTE, text, strlen(text), PMCK__MODE_FILE(0))))
		return ret;
	for (unsigned k = 0;; k++) {
		int n = k ? snprintf(dst, sizeof(dst), "%s/step-%012" PRIu64 "-%s-%u", qdir, step, when, k)
			  : snprintf(dst, sizeof(dst), "%s/step-%012" PRIu64 "-%s", qdir, step, when);
		if (n < 0 || (size_t)n >= sizeof(dst))
			return pma__err(-ENAMETOOLONG, "path too long under %s", qdir);
		if (!lstat(dst, &st))
			continue; /* taken: the next suffix */
		if (errno == ENOENT)
			break;
		return pma__err(-errno, "quarantine %s: %s: %s", src, dst, strerror(errno));
	}
	if (rename(src, dst))
		return pma__err(-errno, "move %s to %s: %s", src, dst, strerror(errno));
	/* Both directories changed: the step is durably out of DIR and in DIR/quarantine. */
	if ((ret = pmck__fsync_dir(qdir)) || (ret = pmck__fsync_dir(dir)))
		return ret;
	if (moved)
		snprintf(moved, len, "%s", dst);
	return 0;
}
