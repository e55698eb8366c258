/* The sandboxer binary: `serve` runs the daemon; every other verb is the CLI. */
#include <string.h>

#include "cli/cli.h"
#include "serve.h"

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "serve") == 0)
        return serve_main(argc - 1, argv + 1);
    return cli_main(argc, argv);
}
