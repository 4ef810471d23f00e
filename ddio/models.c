/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * models.c -- the root ports whose DDIO register this library knows.
 *
 * Sources for every ID and for the register layout are in docs/ddio.md.
 * Only Skylake-SP/Cascade Lake is VERIFIED: Intel's Xeon Scalable
 * datasheet (volume 2, registers) documents perfctrlsts_0 at 0x180 for
 * these IIO root ports.  The Ice Lake-SP and Sapphire Rapids IDs are
 * identified from kernel boot logs; their register layout at 0x180 is not
 * confirmed from a datasheet here, so changing them needs DDIO_FORCE.
 */
#include <stddef.h>

#include "internal.h"

#define INTEL 0x8086

static const struct ddio_model models[] = {
	/* Skylake-SP and its refresh Cascade Lake share the IIO root port IDs. */
	{INTEL, 0x2030, "Skylake-SP/Cascade Lake", DDIO_SUPPORT_VERIFIED},
	{INTEL, 0x2031, "Skylake-SP/Cascade Lake", DDIO_SUPPORT_VERIFIED},
	{INTEL, 0x2032, "Skylake-SP/Cascade Lake", DDIO_SUPPORT_VERIFIED},
	{INTEL, 0x2033, "Skylake-SP/Cascade Lake", DDIO_SUPPORT_VERIFIED},
	{INTEL, 0x347a, "Ice Lake-SP", DDIO_SUPPORT_UNVERIFIED},
	{INTEL, 0x347b, "Ice Lake-SP", DDIO_SUPPORT_UNVERIFIED},
	{INTEL, 0x347c, "Ice Lake-SP", DDIO_SUPPORT_UNVERIFIED},
	{INTEL, 0x347d, "Ice Lake-SP", DDIO_SUPPORT_UNVERIFIED},
	{INTEL, 0x352a, "Sapphire Rapids", DDIO_SUPPORT_UNVERIFIED},
	{INTEL, 0x352b, "Sapphire Rapids", DDIO_SUPPORT_UNVERIFIED},
	{INTEL, 0x352c, "Sapphire Rapids", DDIO_SUPPORT_UNVERIFIED},
};

const struct ddio_model *
ddio__model_find(uint16_t vendor, uint16_t device)
{
	for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
		if (models[i].vendor == vendor && models[i].device == device)
			return &models[i];
	return NULL;
}

const char *
ddio_support_name(enum ddio_support s)
{
	switch (s) {
	case DDIO_SUPPORT_VERIFIED: return "verified";
	case DDIO_SUPPORT_UNVERIFIED: return "unverified";
	default: return "unknown";
	}
}

const char *
ddio_state_name(enum ddio_state s)
{
	switch (s) {
	case DDIO_STATE_ON: return "on";
	case DDIO_STATE_OFF: return "off";
	case DDIO_STATE_PARTIAL: return "partial";
	default: return "unknown";
	}
}

enum ddio_state
ddio_state_of(uint32_t v)
{
	if (v & DDIO_USE_ALLOCATING_FLOW_WR)
		return DDIO_STATE_ON;
	return (v & DDIO_NOSNOOPOPWREN) ? DDIO_STATE_OFF : DDIO_STATE_PARTIAL;
}
