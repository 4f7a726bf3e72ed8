/* Configuration and information text as the Python bindings (UCXX, UCX-Py) read them:
 * ucp_config_modify / ucp_config_print round trips, and ucp_context_print_info's resource
 * lines. */
#include "contract.h"

#include <string.h>

/* ucp_config_print's text into a malloc'd string. */
static char *print_config(ucp_config_t *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CT_CHECK(f != NULL, "open_memstream");
    ucp_config_print(c, f, NULL, UCS_CONFIG_PRINT_CONFIG);
    fclose(f);
    return text;
}

/* The value printed for `key` (a line `key=value`), or NULL. */
static const char *value_of(const char *text, const char *key, char *out, size_t n)
{
    size_t kl = strlen(key);
    for (const char *l = text; l != NULL && *l != '\0';) {
        const char *nl = strchr(l, '\n');
        size_t ll = nl ? (size_t)(nl - l) : strlen(l);
        if (ll > kl && strncmp(l, key, kl) == 0 && l[kl] == '=') {
            size_t vl = ll - kl - 1 < n - 1 ? ll - kl - 1 : n - 1;
            memcpy(out, l + kl + 1, vl);
            out[vl] = '\0';
            return out;
        }
        l = nl ? nl + 1 : NULL;
    }
    return NULL;
}

/* With UCS_CONFIG_PRINT_CONFIG every line is NAME=value (UCXX drops the first four
 * characters of each line as "UCX_" and splits at '='); SEG_SIZE set through
 * ucp_config_modify prints back as given, a bad value for it is refused with
 * UCS_ERR_INVALID_PARAM, a key nobody knows is accepted and printed back. */
static void modify_and_print(void)
{
    ucp_config_t *c;
    CT_OK(ucp_config_read(NULL, NULL, &c));
    CT_OK(ucp_config_modify(c, "SEG_SIZE", "3M"));
    ucs_status_t s = ucp_config_modify(c, "SEG_SIZE", "invalid-size");
    CT_CHECK(s == UCS_ERR_INVALID_PARAM, "a bad SEG_SIZE gave %d", (int)s);
    CT_OK(ucp_config_modify(c, "RUCX_CONTRACT_UNKNOWN_OPTION", "3M"));
    char *text = print_config(c);
    int lines = 0;
    for (const char *l = text; *l != '\0';) {
        const char *nl = strchr(l, '\n');
        size_t ll = nl ? (size_t)(nl - l) : strlen(l);
        const char *eq = memchr(l, '=', ll);
        CT_CHECK(ll >= 4 && eq != NULL && memchr(eq + 1, '=', ll - (size_t)(eq + 1 - l)) == NULL,
                 "a line that is not NAME=value: '%.*s'", (int)ll, l);
        lines++;
        l = nl ? nl + 1 : l + ll;
    }
    CT_CHECK(lines > 5, "only %d lines", lines);
    char v[64];
    CT_CHECK(value_of(text, "UCX_SEG_SIZE", v, sizeof(v)) && strcmp(v, "3M") == 0,
             "UCX_SEG_SIZE printed as '%s'", value_of(text, "UCX_SEG_SIZE", v, sizeof(v)) ? v : "(none)");
    CT_CHECK(value_of(text, "UCX_TLS", v, sizeof(v)) != NULL, "no UCX_TLS line");
    CT_CHECK(value_of(text, "RUCX_CONTRACT_UNKNOWN_OPTION", v, sizeof(v)) && strcmp(v, "3M") == 0,
             "the unknown key was not printed back");
    free(text);
    ucp_config_release(c);
}

/* ucp_context_print_info lists each resource in use on a line that starts with '#' and
 * holds "resource", "md", "dev" and "flags" in that order, ending in tl/dev: what the
 * Python bindings' get_active_transports() reads. With UCX_TLS=tcp a tcp resource is
 * listed. */
static void context_info_lists_resources(void)
{
    setenv("UCX_TLS", "tcp,self", 1);
    ucp_context_h ctx = ct_context(UCP_FEATURE_TAG);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CT_CHECK(f != NULL, "open_memstream");
    ucp_context_print_info(ctx, f);
    fclose(f);
    int resources = 0, tcp = 0;
    for (char *l = strtok(text, "\n"); l != NULL; l = strtok(NULL, "\n")) {
        char *r = strstr(l, "resource"), *m = r ? strstr(r, "md") : NULL;
        char *d = m ? strstr(m, "dev") : NULL, *fl = d ? strstr(d, "flags") : NULL;
        if (l[0] != '#' || fl == NULL) continue;
        resources++;
        char *last = strrchr(l, ' ');
        CT_CHECK(last != NULL && strchr(last, '/') != NULL, "no tl/dev at the end of '%s'", l);
        if (strncmp(last + 1, "tcp/", 4) == 0) tcp++;
    }
    CT_CHECK(resources > 0 && tcp > 0, "%d resource lines, %d of tcp:\n%s", resources, tcp, text);
    free(text);
    ucp_cleanup(ctx);
}

const struct ct_test ct_config[] = {
    {"modify_and_print", "ucp_config_print with UCS_CONFIG_PRINT_CONFIG prints only NAME=value lines; SEG_SIZE set by ucp_config_modify prints back, a bad value is UCS_ERR_INVALID_PARAM, an unknown key is kept and printed", modify_and_print},
    {"context_info_lists_resources", "ucp_context_print_info has a '# ... resource N : md N dev N flags ... tl/dev' line per resource", context_info_lists_resources},
    {0},
};
