/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What xmit_drops.bpf.c counts per egress interface, shared with user space
 * (steer/xmit_drops.h). */
#ifndef VECFLOW_XMIT_ABI_H
#define VECFLOW_XMIT_ABI_H

#include <linux/types.h>

/* Interfaces counted at most (a vecflowd has a few ports). */
#define VF_XMIT_INTERFACES 256

/* Per CPU, per egress interface. */
struct vf_xmit_drops {
  __u64 frames; /* frames lost after the program redirected them to the interface */
  __u64 events; /* bulk transmits that lost any, and failed redirects */
  __u64 errors; /* of which with an error (a whole bulk refused, a redirect refused) */
};

#endif /* VECFLOW_XMIT_ABI_H */
