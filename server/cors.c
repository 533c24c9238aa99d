/*
 * server/cors.c - cross-origin requests from browsers, answered as vLLM's server answers them
 * (its FastAPI app runs Starlette's CORSMiddleware with --allowed-origins, --allowed-methods,
 * --allowed-headers, --allow-credentials; defaults ["*"], ["*"], ["*"], off):
 *
 * - a preflight (OPTIONS with Origin and Access-Control-Request-Method, on any path) is
 *   answered here, before routes and API keys: 200 "OK" with the allowed methods, headers
 *   and Max-Age 600, or 400 "Disallowed CORS origin, method, headers" naming what failed;
 * - any other request from an allowed Origin gets Access-Control-Allow-Origin ("*", or the
 *   origin itself with credentials, a cookie or an explicit list, then with Vary: Origin) on
 *   whatever it is answered, errors included; a request from another origin gets none (the
 *   browser then withholds the answer).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "server/srv.h"

/* What "*" allows, and the headers a browser may always send (Starlette's lists). */
static const char *const ALL_METHODS = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT";
static const char *const SAFELISTED[] = {"Accept", "Accept-Language", "Content-Language",
                                         "Content-Type"};

static void free_list(char **l, size_t n) {
    for (size_t i = 0; l && i < n; i++) free(l[i]);
    free(l);
}

void pl_srv_cors_free(pl_srv_cors *c) {
    free_list(c->origins, c->n_origins);
    free_list(c->methods, c->n_methods);
    free_list(c->headers, c->n_headers);
    memset(c, 0, sizeof *c);
}

static bool in_list(char *const *l, size_t n, const char *s) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(l[i], s)) return true;
    return false;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A JSON array of strings ('["*"]' when the flag is unset) into a list; extra (n_extra, may
 * be 0) are added and the list sorted when `sorted`. */
static bool parse_list(const char *flag, const char *json, const char *const *extra,
                       size_t n_extra, bool sorted, char ***out, size_t *out_n, bool *all) {
    json_error_t je;
    json_t *a = json_loads(json ? json : "[\"*\"]", JSON_DECODE_ANY, &je);
    bool ok = json_is_array(a);
    for (size_t i = 0; ok && i < json_array_size(a); i++) ok = json_is_string(json_array_get(a, i));
    if (!ok) {
        fprintf(stderr, "pagellm serve: %s: '%s' is not a JSON list of strings (as vLLM takes "
                "it: '[\"https://example.com\"]', '[\"*\"]')\n", flag, json);
        json_decref(a);
        return false;
    }
    size_t n = json_array_size(a), k = 0;
    char **l = calloc(n + n_extra + 1, sizeof *l);
    ok = l != NULL;
    for (size_t i = 0; ok && i < n + n_extra; i++) {
        const char *v = i < n ? json_string_value(json_array_get(a, i)) : extra[i - n];
        *all |= !strcmp(v, "*");
        if (in_list(l, k, v)) continue;
        ok = (l[k++] = strdup(v)) != NULL;
    }
    json_decref(a);
    if (!ok) {
        free_list(l, k);
        fprintf(stderr, "pagellm serve: %s: out of memory\n", flag);
        return false;
    }
    if (sorted) qsort(l, k, sizeof *l, by_name);
    *out = l;
    *out_n = k;
    return true;
}

bool pl_srv_cors_init(pl_srv_options *opt) {
    pl_srv_cors *c = &opt->cors;
    bool credentials = c->credentials;
    memset(c, 0, sizeof *c);
    c->credentials = credentials;
    if (!parse_list("--allowed-origins", opt->allowed_origins, NULL, 0, false, &c->origins,
                    &c->n_origins, &c->all_origins) ||
        !parse_list("--allowed-methods", opt->allowed_methods, NULL, 0, false, &c->methods,
                    &c->n_methods, &c->all_methods) ||
        !parse_list("--allowed-headers", opt->allowed_headers, SAFELISTED,
                    sizeof SAFELISTED / sizeof SAFELISTED[0], true, &c->headers, &c->n_headers,
                    &c->all_headers)) {
        pl_srv_cors_free(c);
        return false;
    }
    return true;
}

static void add(pl_srv_req *r, const char *name, const char *value) {
    for (int i = 0; i < r->n_extra; i++) /* set once: a later value replaces it */
        if (!strcmp(r->extra[i].name, name)) {
            snprintf(r->extra[i].value, sizeof r->extra[i].value, "%s", value);
            return;
        }
    if (r->n_extra == (int)(sizeof r->extra / sizeof r->extra[0])) return;
    r->extra[r->n_extra].name = name;
    snprintf(r->extra[r->n_extra].value, sizeof r->extra[0].value, "%s", value);
    r->n_extra++;
}

static bool origin_allowed(const pl_srv_cors *c, const char *origin) {
    return c->all_origins || in_list(c->origins, c->n_origins, origin);
}

static bool method_allowed(const pl_srv_cors *c, const char *method) {
    static const char *const all[] = {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"};
    if (!c->all_methods) return in_list(c->methods, c->n_methods, method);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(all[i], method)) return true;
    return false;
}

/* Every name of a comma-separated header list is allowed (case does not matter). */
static bool headers_allowed(const pl_srv_cors *c, const char *list) {
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        size_t n = strcspn(p, ",");
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
        if (n) {
            bool found = false;
            for (size_t i = 0; i < c->n_headers && !found; i++)
                found = strlen(c->headers[i]) == n && !strncasecmp(c->headers[i], p, n);
            if (!found) return false;
        }
        p += strcspn(p, ",");
    }
    return true;
}

static void allow_origin_explicitly(pl_srv_req *r, const char *origin) {
    add(r, "Access-Control-Allow-Origin", origin);
    add(r, "Vary", "Origin");
}

bool pl_srv_cors_preflight(const pl_srv_cors *c, pl_srv_req *r, const char *method,
                           const pl_srv_headers *h, pl_srv_response *out) {
    if (strcmp(method, "OPTIONS") != 0 || !h->origin || !h->request_method) return false;
    bool explicit_origin = !c->all_origins || c->credentials;
    if (explicit_origin) add(r, "Vary", "Origin");
    else add(r, "Access-Control-Allow-Origin", "*");
    char list[512] = "";
    for (size_t i = 0; !c->all_methods && i < c->n_methods; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 c->methods[i]);
    add(r, "Access-Control-Allow-Methods", c->all_methods ? ALL_METHODS : list);
    add(r, "Access-Control-Max-Age", "600");
    list[0] = '\0';
    for (size_t i = 0; !c->all_headers && i < c->n_headers; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                 c->headers[i]);
    if (!c->all_headers) add(r, "Access-Control-Allow-Headers", list);
    if (c->credentials) add(r, "Access-Control-Allow-Credentials", "true");

    char failed[64] = "";
    if (origin_allowed(c, h->origin)) {
        if (explicit_origin) add(r, "Access-Control-Allow-Origin", h->origin);
    } else {
        strcat(failed, "origin");
    }
    if (!method_allowed(c, h->request_method)) strcat(strcat(failed, failed[0] ? ", " : ""), "method");
    if (c->all_headers && h->request_headers)
        add(r, "Access-Control-Allow-Headers", h->request_headers);
    else if (h->request_headers && !headers_allowed(c, h->request_headers))
        strcat(strcat(failed, failed[0] ? ", " : ""), "headers");

    char text[96];
    snprintf(text, sizeof text, failed[0] ? "Disallowed CORS %s" : "OK", failed);
    char *body = strdup(text);
    *out = (pl_srv_response){.status = body ? (failed[0] ? 400 : 200) : 0,
                             .type = "text/plain; charset=utf-8", .body = body,
                             .len = body ? strlen(body) : 0};
    return true;
}

void pl_srv_cors_simple(const pl_srv_cors *c, pl_srv_req *r, const pl_srv_headers *h) {
    if (!h->origin || !origin_allowed(c, h->origin)) return;
    if (c->all_origins) add(r, "Access-Control-Allow-Origin", "*");
    if (c->credentials) add(r, "Access-Control-Allow-Credentials", "true");
    /* a cookie (sent with credentials) may not go with "*": the origin itself */
    if ((c->all_origins && h->cookie) || !c->all_origins) allow_origin_explicitly(r, h->origin);
}
