/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * dir.c -- pmckpt's commands on copy-out directories and files: list --dir,
 * verify --dir, verify --file, clean.
 *
 * Directories: `list --dir`, `verify --dir` and `clean` see a copy-out
 * directory through the library (pmck_copyout_list, pmck_copyout_clean),
 * which owns its rules: which names are steps, what a COMPLETE marker
 * says, which lineage (layout hash and world size) a step belongs to.
 * `clean` is the copier's retention applied to every lineage: in each, the
 * newest K complete steps by (generation, step) stay and the older ones
 * go, so a run restarted at step 1 keeps its steps next to an older run's
 * 1339; every incomplete step and the temporary files of kept steps go
 * too, and steps whose lineage cannot be told (unreadable marker) are left
 * alone and reported.  Like the copier's start-up, it assumes no copier is
 * writing to DIR meanwhile.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cmd.h"

/* --------------------------------------------------- copy-out directories */

/* "lineage" of a step: its layout hash and world size, the unit of retention. */
static void
lineage_text(const struct pmck_copyout_step *s, char *buf, size_t len)
{
	tool_fmt(buf, len, "%016" PRIx64 "/%u", s->layout_hash, s->world_size);
}

static size_t
count_complete(const struct pmck_copyout_listing *l)
{
	size_t c = 0;
	for (size_t i = 0; i < l->nsteps; i++)
		c += l->steps[i].complete;
	return c;
}

/* The quarantined steps of a listing: JSON array, or one line each (the NOTE's "what failed"). */
static json_object *
quarantine_json(const struct pmck_copyout_listing *l)
{
	json_object *qa = json_object_new_array();
	for (size_t i = 0; i < l->nquarantined; i++) {
		json_object *qo = json_object_new_object();
		json_object_object_add(qo, "step", tool_json_u64(l->quarantined[i].step));
		json_object_object_add(qo, "name", json_object_new_string(l->quarantined[i].name));
		json_object_object_add(qo, "note", json_object_new_string(l->quarantined[i].note));
		json_object_array_add(qa, qo);
	}
	return qa;
}

static void
quarantine_print(const struct pmck_copyout_listing *l)
{
	for (size_t i = 0; i < l->nquarantined; i++) {
		const char *what = strstr(l->quarantined[i].note, "what failed: ");
		int n = what ? (int)strcspn(what + 13, "\n") : 0;
		printf("quarantined step %" PRIu64 ": %s/quarantine/%s%s%.*s\n", l->quarantined[i].step,
				l->dir, l->quarantined[i].name, what ? ": " : "", n, what ? what + 13 : "");
	}
}

static int
list_dir(const char *dir, struct pmck_copyout_listing **l)
{
	return pmck_copyout_list(dir, l) ? tool_fail("%s", pmck_errormsg()) : 0;
}

int
cmd_list_dir(const struct opts *o)
{
	struct pmck_copyout_listing *l;
	char b[32], lin[48];
	int ret = list_dir(o->dir, &l);

	if (ret)
		return ret;
	if (o->json) {
		json_object *root = json_object_new_object(), *arr = json_object_new_array();
		json_object_object_add(root, "dir", json_object_new_string(o->dir));
		json_object_object_add(root, "bytes", tool_json_u64(l->bytes));
		for (size_t i = 0; i < l->nsteps; i++) {
			const struct pmck_copyout_step *s = &l->steps[i];
			json_object *so = json_object_new_object(), *fa = json_object_new_array();
			json_object_object_add(so, "step", tool_json_u64(s->step));
			json_object_object_add(so, "name", json_object_new_string(s->name));
			json_object_object_add(so, "complete", json_object_new_boolean(s->complete));
			if (s->complete)
				json_object_object_add(so, "marker_ok", json_object_new_boolean(s->marker_ok));
			json_object_object_add(so, "world_size",
					s->world_size > 0 ? tool_json_u64(s->world_size) : NULL);
			tool_fmt(b, sizeof(b), "%016" PRIx64, s->layout_hash);
			json_object_object_add(so, "layout_hash", s->layout_known ?
					json_object_new_string(b) : NULL);
			if (s->layout_known)
				json_object_object_add(so, "layout_hash_recorded",
						json_object_new_boolean(s->has_layout_hash));
			json_object_object_add(so, "generation", s->marker_ok ? tool_json_u64(s->generation) : NULL);
			lineage_text(s, lin, sizeof(lin));
			json_object_object_add(so, "lineage", s->layout_known ?
					json_object_new_string(lin) : NULL);
			json_object_object_add(so, "bytes", tool_json_u64(s->bytes));
			for (size_t k = 0; k < s->nfiles; k++) {
				const struct pmck_copyout_file *f = &s->files[k];
				json_object *fo = json_object_new_object();
				json_object_object_add(fo, "name", json_object_new_string(f->name));
				json_object_object_add(fo, "rank", f->rank >= 0 ? tool_json_u64((uint64_t)f->rank) : NULL);
				json_object_object_add(fo, "bytes", tool_json_u64(f->bytes));
				json_object_object_add(fo, "temporary", json_object_new_boolean(f->temporary));
				json_object_array_add(fa, fo);
			}
			json_object_object_add(so, "files", fa);
			json_object_array_add(arr, so);
		}
		json_object_object_add(root, "steps", arr);
		json_object_object_add(root, "quarantined", quarantine_json(l));
		tool_json_print(root);
	} else {
		printf("dir %s: %zu step%s (%zu complete), %s\n", o->dir, l->nsteps,
				l->nsteps == 1 ? "" : "s", count_complete(l), tool_hsize_b(l->bytes, b, sizeof(b)));
		for (size_t i = 0; i < l->nsteps; i++) {
			const struct pmck_copyout_step *s = &l->steps[i];
			printf("step %" PRIu64 ": %s", s->step, s->complete ? "complete" : "INCOMPLETE");
			if (s->marker_ok && s->layout_known)
				printf(", world size %u, layout %016" PRIx64 "%s, generation %" PRIu64,
						s->world_size, s->layout_hash,
						s->has_layout_hash ? "" : " (from rank 0's file)", s->generation);
			else if (s->marker_ok)
				printf(", world size %u, layout unknown, generation %" PRIu64,
						s->world_size, s->generation);
			else if (s->complete)
				printf(", unreadable marker");
			printf(", %zu file%s, %s\n", s->nfiles, s->nfiles == 1 ? "" : "s",
					tool_hsize(s->bytes, b, sizeof(b)));
			for (size_t k = 0; k < s->nfiles; k++) {
				const struct pmck_copyout_file *f = &s->files[k];
				printf("  %-32s %14" PRIu64 " bytes%s\n", f->name, f->bytes,
						f->temporary ? "  (temporary: leftover of a copy)" : "");
			}
		}
		quarantine_print(l);
	}
	pmck_copyout_listing_free(&l);
	return 0;
}

static json_object *
file_info_json(const char *path, int r, const struct pmck_file_info *fi, const char *why)
{
	json_object *o = json_object_new_object();
	json_object_object_add(o, "file", json_object_new_string(path));
	json_object_object_add(o, "ok", json_object_new_boolean(r == 0));
	if (r == 0) {
		json_object_object_add(o, "step", tool_json_u64(fi->step));
		json_object_object_add(o, "rank", tool_json_u64(fi->rank));
		json_object_object_add(o, "world_size", tool_json_u64(fi->world_size));
		json_object_object_add(o, "ntensors", tool_json_u64(fi->ntensors));
		json_object_object_add(o, "data_bytes", tool_json_u64(fi->data_bytes));
		json_object_object_add(o, "checksums", json_object_new_boolean(fi->has_checksums));
	} else {
		json_object_object_add(o, "error", json_object_new_string(why));
	}
	return o;
}

static void
file_info_text(const char *path, int r, const struct pmck_file_info *fi, const char *why,
		const char *indent)
{
	char b[32];
	if (r) {
		printf("%s%s: FAILED: %s\n", indent, path, why);
		return;
	}
	if (fi->has_checksums)
		printf("%s%s: ok: step %" PRIu64 ", rank %u of %u, %" PRIu64 " tensors, %s, "
				"checksums verified\n", indent, path, fi->step, fi->rank, fi->world_size,
				fi->ntensors, tool_hsize(fi->data_bytes, b, sizeof(b)));
	else
		printf("%s%s: ok: %" PRIu64 " tensors, %s; no pmckpt checksums for every tensor: "
				"structure checked only\n", indent, path, fi->ntensors,
				tool_hsize(fi->data_bytes, b, sizeof(b)));
}

int
cmd_verify_file(const struct opts *o)
{
	struct pmck_file_info fi;
	char why[1024] = "";
	int r = pmck_safetensors_verify(o->file, &fi);

	if (r)
		tool_fmt(why, sizeof(why), "%s", pmck_errormsg());
	if (o->json)
		tool_json_print(file_info_json(o->file, r, &fi, why));
	else
		file_info_text(o->file, r, &fi, why, "");
	return r ? tool_fail("%s", why) : 0;
}

int
cmd_verify_dir(const struct opts *o)
{
	struct pmck_copyout_listing *l;
	char path[PATH_MAX * 2], first[1024] = "";
	int ret = list_dir(o->dir, &l), bad = 0;
	size_t checked = 0;

	if (ret)
		return ret;
	json_object *root = NULL, *arr = NULL;
	if (o->json) {
		root = json_object_new_object();
		arr = json_object_new_array();
		json_object_object_add(root, "dir", json_object_new_string(o->dir));
	}
	for (size_t i = 0; i < l->nsteps; i++) {
		const struct pmck_copyout_step *s = &l->steps[i];
		json_object *so = NULL, *fa = NULL;
		char err[768] = "";
		if (o->json) {
			so = json_object_new_object();
			fa = json_object_new_array();
			json_object_object_add(so, "step", tool_json_u64(s->step));
			json_object_object_add(so, "complete", json_object_new_boolean(s->complete));
		} else {
			printf("step %" PRIu64 ": %s\n", s->step, s->complete ? "complete" :
					"incomplete: not checked");
		}
		if (s->complete) {
			checked++;
			if (!s->marker_ok)
				tool_fmt(err, sizeof(err), "%s/%s: unreadable COMPLETE marker", o->dir,
						s->name);
			/* Every rank of the world must have its file. */
			for (unsigned r = 0; !err[0] && r < s->world_size; r++) {
				size_t k;
				for (k = 0; k < s->nfiles && s->files[k].rank != (int)r; k++)
					;
				if (k == s->nfiles)
					tool_fmt(err, sizeof(err), "%s/%s: no file for rank %u of %u", o->dir,
							s->name, r, s->world_size);
			}
			for (size_t k = 0; k < s->nfiles; k++) {
				const struct pmck_copyout_file *f = &s->files[k];
				struct pmck_file_info fi;
				char why[1024] = "";
				if (f->rank < 0)
					continue;
				tool_fmt(path, sizeof(path), "%s/%s/%s", o->dir, s->name, f->name);
				int r = pmck_safetensors_verify(path, &fi);
				if (r)
					tool_fmt(why, sizeof(why), "%s", pmck_errormsg());
				else if (fi.has_checksums && fi.step != s->step) {
					r = 1;
					tool_fmt(why, sizeof(why), "%s: holds step %" PRIu64 ", not %" PRIu64,
							path, fi.step, s->step);
				}
				if (r && !err[0])
					tool_fmt(err, sizeof(err), "%s", why);
				if (o->json)
					json_object_array_add(fa, file_info_json(path, r, &fi, why));
				else
					file_info_text(path, r, &fi, why, "  ");
			}
			if (err[0]) {
				bad++;
				if (!first[0])
					tool_fmt(first, sizeof(first), "%s", err);
				if (!o->json)
					printf("  step %" PRIu64 " FAILED: %s\n", s->step, err);
			}
		}
		if (o->json) {
			json_object_object_add(so, "ok", json_object_new_boolean(!err[0]));
			if (err[0])
				json_object_object_add(so, "error", json_object_new_string(err));
			json_object_object_add(so, "files", fa);
			json_object_array_add(arr, so);
		}
	}
	if (!checked && !first[0])
		tool_fmt(first, sizeof(first), "%s: no complete step", o->dir);
	if (o->json) {
		json_object_object_add(root, "ok", json_object_new_boolean(!first[0]));
		json_object_object_add(root, "complete_steps", tool_json_u64(checked));
		json_object_object_add(root, "failed_steps", tool_json_u64((uint64_t)bad));
		json_object_object_add(root, "steps", arr);
		json_object_object_add(root, "quarantined", quarantine_json(l));
		tool_json_print(root);
	} else {
		if (!first[0])
			printf("%s: %zu complete step%s verified\n", o->dir, checked,
					checked == 1 ? "" : "s");
		quarantine_print(l); /* moved aside by recovery: not verified, listed */
	}
	pmck_copyout_listing_free(&l);
	if (first[0])
		return bad > 1 ? tool_fail("%s (and %d more failed steps)", first, bad - 1) : tool_fail("%s", first);
	return 0;
}

/* ----------------------------------------------------------------- clean */

struct clean_out {
	const struct opts *o;
	json_object *kept, *removed, *files, *left;
	uint64_t freed;
	unsigned nkept, nleft;
};

/* One decision of pmck_copyout_clean, printed or added to the JSON document. */
static int
clean_report(void *arg, const struct pmck_clean_event *ev)
{
	struct clean_out *c = arg;
	const struct opts *o = c->o;
	const struct pmck_copyout_step *s = ev->step;
	const char *verb = o->dry_run ? "would remove" : "removed";
	char b[32], lin[48], fp[PATH_MAX * 2];
	json_object *so;

	lineage_text(s, lin, sizeof(lin));
	switch (ev->action) {
	case PMCK_CLEAN_TEMPORARY:
		tool_fmt(fp, sizeof(fp), "%s/%s/%s", o->dir, s->name, ev->file->name);
		c->freed += ev->file->bytes;
		if (!o->json) {
			printf("%s %s (temporary, %" PRIu64 " bytes)\n", verb, fp, ev->file->bytes);
			break;
		}
		so = json_object_new_object();
		json_object_object_add(so, "file", json_object_new_string(fp));
		json_object_object_add(so, "step", tool_json_u64(s->step));
		json_object_object_add(so, "bytes", tool_json_u64(ev->file->bytes));
		json_object_array_add(c->files, so);
		break;
	case PMCK_CLEAN_KEPT:
		c->nkept++;
		if (o->json)
			json_object_array_add(c->kept, tool_json_u64(s->step));
		else
			printf("kept step %" PRIu64 " (%s, lineage %s, generation %" PRIu64 ")\n",
					s->step, tool_hsize(s->bytes, b, sizeof(b)), lin, s->generation);
		break;
	case PMCK_CLEAN_REMOVED:
	case PMCK_CLEAN_INCOMPLETE:
		c->freed += s->bytes;
		if (!o->json) {
			if (ev->action == PMCK_CLEAN_REMOVED)
				printf("%s step %" PRIu64 " (complete, beyond --keep %llu of lineage %s, "
						"generation %" PRIu64 ", %s)\n", verb, s->step, o->keep, lin,
						s->generation, tool_hsize(s->bytes, b, sizeof(b)));
			else
				printf("%s step %" PRIu64 " (incomplete, %s)\n", verb, s->step,
						tool_hsize(s->bytes, b, sizeof(b)));
			break;
		}
		so = json_object_new_object();
		json_object_object_add(so, "step", tool_json_u64(s->step));
		json_object_object_add(so, "name", json_object_new_string(s->name));
		json_object_object_add(so, "complete", json_object_new_boolean(s->complete));
		json_object_object_add(so, "lineage", s->complete ? json_object_new_string(lin) : NULL);
		json_object_object_add(so, "generation", s->complete ? tool_json_u64(s->generation) : NULL);
		json_object_object_add(so, "bytes", tool_json_u64(s->bytes));
		json_object_array_add(c->removed, so);
		break;
	case PMCK_CLEAN_UNKNOWN:
		c->nleft++;
		if (!o->json) {
			printf("left step %" PRIu64 " (%s: lineage unknown, not removed)\n", s->step,
					s->marker_ok ? "no layout hash in its marker or rank 0's file" :
					"unreadable COMPLETE marker");
			break;
		}
		so = json_object_new_object();
		json_object_object_add(so, "step", tool_json_u64(s->step));
		json_object_object_add(so, "name", json_object_new_string(s->name));
		json_object_object_add(so, "marker_ok", json_object_new_boolean(s->marker_ok));
		json_object_object_add(so, "bytes", tool_json_u64(s->bytes));
		json_object_array_add(c->left, so);
		break;
	}
	return 0;
}

/* Retention per lineage, by the library's rules (pmck_copyout_clean). */
int
cmd_clean(const struct opts *o)
{
	struct clean_out c = {.o = o};
	char err[1024] = "", b[32];

	if (o->json) {
		c.kept = json_object_new_array();
		c.removed = json_object_new_array();
		c.files = json_object_new_array();
		c.left = json_object_new_array();
	}
	if (pmck_copyout_clean(o->dir, (unsigned)o->keep, o->dry_run ? PMCK_CLEAN_DRY_RUN : 0,
			clean_report, &c))
		tool_fmt(err, sizeof(err), "%s", pmck_errormsg());
	if (o->json) {
		json_object *root = json_object_new_object();
		json_object_object_add(root, "dir", json_object_new_string(o->dir));
		json_object_object_add(root, "keep", tool_json_u64(o->keep));
		json_object_object_add(root, "dry_run", json_object_new_boolean(o->dry_run));
		json_object_object_add(root, "ok", json_object_new_boolean(!err[0]));
		json_object_object_add(root, "kept", c.kept);
		json_object_object_add(root, "removed", c.removed);
		json_object_object_add(root, "removed_files", c.files);
		json_object_object_add(root, "left", c.left);
		json_object_object_add(root, "freed_bytes", tool_json_u64(c.freed));
		if (err[0])
			json_object_object_add(root, "error", json_object_new_string(err));
		tool_json_print(root);
	} else if (!err[0]) {
		printf("%s: kept %u complete step%s", o->dir, c.nkept, c.nkept == 1 ? "" : "s");
		if (c.nleft)
			printf(", left %u of unknown lineage", c.nleft);
		printf(", %s %s\n", o->dry_run ? "would free" : "freed", tool_hsize_b(c.freed, b, sizeof(b)));
	}
	return err[0] ? tool_fail("%s", err) : 0;
}
