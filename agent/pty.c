/* Pseudo-terminals: opening and sizing the PTYs of tty execs and of the console. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "agent.h"
#include "common/cleanup.h"

/* The slave side: TIOCGPTPEER (Linux 4.13) avoids a lookup in /dev/pts; ptsname as fallback. */
static int open_slave(int master)
{
#ifdef TIOCGPTPEER
    int fd = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd >= 0)
        return fd;
#endif
    char name[64];
    if (ptsname_r(master, name, sizeof(name)) != 0)
        return -1;
    return open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
}

void agent_pty_resize(int master, uint16_t cols, uint16_t rows)
{
    struct winsize ws = {.ws_row = rows ? rows : 24, .ws_col = cols ? cols : 80};
    (void)ioctl(master, TIOCSWINSZ, &ws);
}

int agent_pty_open(int *master, int *slave, uint16_t cols, uint16_t rows, err_t *err)
{
    _cleanup_close_ int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
    if (m < 0)
        return err_sys(err, "opening /dev/ptmx");
    if (unlockpt(m) < 0)
        return err_sys(err, "unlockpt");
    int s = open_slave(m);
    if (s < 0)
        return err_sys(err, "opening the pty slave");
    agent_pty_resize(m, cols, rows);
    *master = steal_fd(&m);
    *slave = s;
    return 0;
}
