/* ucs_log_dispatch as UCXX's log macros call it: a component of its own, a level, a
 * printf format and its arguments (integers, a string, a double, more than the registers
 * hold). Messages above the component's level are not printed; PRINT always is. */
#include <stdio.h>

typedef struct {
    int log_level;
    char name[16];
    const char *file_filter;
} comp_t;

void ucs_log_dispatch(const char *file, unsigned line, const char *function, int level,
                      comp_t *comp_conf, const char *format, ...);

int main(void)
{
    comp_t comp = {2 /* WARN */, "UCXX", NULL};
    ucs_log_dispatch("/src/worker.cpp", 42, "main", 2, &comp,
                     "warned %d %s %.2f %ld %u %x %c", 7, "text", 2.5, 123456789012L, 9u,
                     0xbeef, 'z');
    ucs_log_dispatch("/src/worker.cpp", 43, "main", 5 /* DEBUG */, &comp, "hidden %d", 1);
    ucs_log_dispatch("/src/worker.cpp", 44, "main", 13 /* PRINT */, &comp, "shown %s", "always");
    ucs_log_dispatch("/src/worker.cpp", 45, "main", 1, &comp, "two\nlines");
    printf("log_dispatch: OK\n");
    return 0;
}
