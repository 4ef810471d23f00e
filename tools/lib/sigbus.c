/* SPDX-License-Identifier: BSD-3-Clause */
/* sigbus.c -- the SIGBUS handler's installation and its async-signal-safe message builders. */
#include <string.h>

#include "sigbus.h"

int
tool_sigbus_install(void (*fn)(int, siginfo_t *, void *))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = fn;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	return sigaction(SIGBUS, &sa, NULL);
}

size_t
tool_sigsafe_put(char *buf, size_t at, size_t len, const char *s)
{
	while (*s && at + 1 < len)
		buf[at++] = *s++;
	return at;
}

size_t
tool_sigsafe_num(char *buf, size_t at, size_t len, uint64_t v, int hex)
{
	char d[24];
	int n = 0;

	do {
		d[n++] = "0123456789abcdef"[v % (hex ? 16 : 10)];
		v /= hex ? 16 : 10;
	} while (v);
	if (hex)
		at = tool_sigsafe_put(buf, at, len, "0x");
	while (n && at + 1 < len)
		buf[at++] = d[--n];
	return at;
}
