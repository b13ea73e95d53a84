/*
 * names.h - the one place that decides what a valid name or address is:
 * RFC 1123 DNS names and labels, Kubernetes object names and label values,
 * IPv4/IPv6 literals, TensorFlow job names. Every value tpumesh writes into
 * an env file or a TF_CONFIG passes one of these checks first.
 *
 * Pure: no I/O. Functions that take (s, len) read exactly len bytes and
 * never need a NUL terminator; a NUL inside the range makes the value
 * invalid. Functions that take a C string read at most the documented bound.
 */
#ifndef MESH_NAMES_H
#define MESH_NAMES_H

#include <stdbool.h>
#include <stddef.h>

/* [A-Za-z0-9] in the C locale, whatever the process locale is. */
bool mesh_names_is_alnum(char c);

/* True when s[0..len) is a DNS name: dot-separated labels of 1-63
 * [A-Za-z0-9-] not starting or ending with '-', total <= 253, no trailing
 * dot. lower_only: upper-case letters are refused (Kubernetes object names).
 * reject_numeric: a name of only digits and dots ("10.0.0", a broken IP) is
 * refused (host names). */
bool mesh_names_is_dns_name(const char *s, size_t len, bool lower_only, bool reject_numeric);

/* True when s[0..len) is an RFC 1123 DNS label as Kubernetes uses it: 1-63
 * of [a-z0-9-], alphanumeric at both ends (a Service or subdomain name). */
bool mesh_names_is_dns_label(const char *s, size_t len);

/* True when s[0..len) is a Kubernetes object name (RFC 1123 subdomain: lower
 * case DNS name, <= 253), e.g. a pod name. */
bool mesh_names_is_k8s_name(const char *s, size_t len);

/* True when s[0..len) is a non-empty Kubernetes label value: <= 63 of
 * [A-Za-z0-9._-], alphanumeric at both ends. */
bool mesh_names_is_label_value(const char *s, size_t len);

/* True when s[0..len) is an IPv4 or IPv6 literal as inet_pton accepts it (no
 * brackets, no zone). *out_v6 (may be NULL) is set only when true. */
bool mesh_names_is_ip(const char *s, size_t len, bool *out_v6);

/* True when s[0..len) is a dotted quad in the only form inet_pton(AF_INET)
 * accepts: four decimal parts 0..255 without leading zeros. A fast path
 * only: false does not mean "not an IP" (mesh_names_is_ip decides). */
bool mesh_names_is_plain_ipv4(const char *s, size_t len);

/* True when s[0..len) is a host a worker can be reached at: an IP literal,
 * or a DNS name that is not made only of digits and dots. */
bool mesh_names_is_host(const char *s, size_t len);

/* True when the C string s (read up to MESH_JOB_NAME_MAX bytes) is a
 * TensorFlow job name: [A-Za-z][A-Za-z0-9_]*, 1..63 characters. TensorFlow's
 * device-name parser accepts [A-Za-z][A-Za-z0-9_]* in older versions and
 * [A-Za-z0-9_]+ in newer ones; this is the rule both accept. */
bool mesh_names_is_job_name(const char *s);

#endif
