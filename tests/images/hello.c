/* The hello-world test image's only program: static, prints a greeting, exits 0. */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
    printf("Hello from Sandboxer!\n");
    printf("This message shows that the hello-world image was pulled, unpacked and run.\n");
    printf("pid=%d uid=%d\n", (int)getpid(), (int)getuid());
    return 0;
}
