#include <stdio.h>
#include <stdlib.h>
#include "util.h"

int main(int argc, char **argv) {
    int xs[64], n = 0;
    for (int i = 1; i < argc && n < 64; i++) xs[n++] = atoi(argv[i]);
    if (n == 0) return 1;
    printf("sum=%d max=%d\n", sum(n, xs), max(n, xs));
    return 0;
}
