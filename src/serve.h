/* `sandboxer serve`: the daemon. */
#pragma once

/* Run the daemon with argv after "serve"; returns the process exit code. */
int serve_main(int argc, char **argv);
