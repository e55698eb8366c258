/* The sandboxer binary: `serve` runs the daemon; every other verb is the CLI. */
#include <string.h>

#include "cli/cli.h"
#include "image/image.h"
#include "runtime/runtime.h"
#include "serve.h"

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "serve") == 0)
        return serve_main(argc - 1, argv + 1);
    /* Internal verbs the daemon runs itself with; not for people. */
    if (argc > 1 && strcmp(argv[1], "internal-shim") == 0)
        return shim_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "internal-unpack-layer") == 0)
        return image_unpack_main(argc - 1, argv + 1);
    return cli_main(argc, argv);
}
