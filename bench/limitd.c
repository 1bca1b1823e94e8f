/* limitd (from the project's shared bench kit): the practical ceiling for serving one file over HTTP/1.1 on this machine.
 *
 * Does the least work an HTTP file server can do: N threads, each with its own SO_REUSEPORT
 * listener and epoll set; a request is recognised by its blank line only (no parsing, no
 * routing, no logging); every request gets the same file: from memory in one send() when it
 * is small, or headers then non-blocking sendfile() when it is large. Keep-alive and
 * pipelining work. It is an anchor for the benchmark, not a server anyone should run.
 *
 * FILE may be a directory of small files: each is then held as a whole response, and a
 * connection answers its requests with them in turn, so a cell of many files is measured
 * against the same bytes musicd and the peers send. One file of the mean size is not the
 * same work: the kernel's cost per answer grows with its size, and not in proportion
 * (one 2 KiB file against one 8 KiB file: +1.8 us a request here), so the mix of the
 * 1,000 files of the benchmark measured 1.05x the CPU per request of one file of their
 * mean size. Every
 * socket holds at most 16 KiB not yet sent (TCP_NOTSENT_LOWAT), the send pattern that measured
 * fastest here for large files (bench/results/large-files.md): without it, lighttpd sent 4 MiB
 * faster than this "ceiling".
 *
 *   cc -O2 -pthread -o limitd limitd.c
 *   ./limitd PORT FILE|DIR [THREADS]        (loopback only)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#define SMALL_MAX (64 * 1024)
#define MAXEV 256

static int port, file_fd;
static off_t file_size;
static char *resp; /* headers (+ body when small) */
static size_t resp_len, head_len;
static int small;
/* A directory's files, each a whole response (headers + body), answered in turn. */
static char **resps;
static size_t *resp_lens, nresps;

struct conn {
    int fd;
    char in[8192];
    size_t in_len;
    size_t pending;   /* whole responses still to send */
    size_t out_off;   /* bytes of the current response sent */
    int want_out;     /* EPOLLOUT asked for */
    size_t turn;      /* which of a directory's responses is next */
};

static char *response(const char *body, size_t body_len, size_t *len) {
    char head[256];
    size_t n = snprintf(head, sizeof head,
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %zu\r\n"
        "Accept-Ranges: bytes\r\nDate: Tue, 01 Dec 2026 00:00:00 GMT\r\n\r\n", body_len);
    char *r = malloc(n + body_len);
    memcpy(r, head, n);
    if (body_len) memcpy(r + n, body, body_len);
    *len = n + body_len;
    return r;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

/* Loads every regular file of DIR (each at most SMALL_MAX) as a response. */
static int load_dir(const char *dir) {
    struct dirent **names;
    int n = scandir(dir, &names, NULL, by_name);
    if (n < 0) { perror(dir); return -1; }
    resps = calloc(n, sizeof *resps);
    resp_lens = calloc(n, sizeof *resp_lens);
    static char body[SMALL_MAX];
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        struct stat st;
        int fd = open(path, O_RDONLY);
        if (fd >= 0 && !fstat(fd, &st) && S_ISREG(st.st_mode) && st.st_size <= SMALL_MAX
            && pread(fd, body, st.st_size, 0) == st.st_size) {
            resps[nresps] = response(body, st.st_size, &resp_lens[nresps]);
            nresps++;
        }
        if (fd >= 0) close(fd);
        free(names[i]);
    }
    free(names);
    if (!nresps) { fprintf(stderr, "%s: no small regular files\n", dir); return -1; }
    return 0;
}

static int listener(void) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, (void *)&a, sizeof a) || listen(s, 4096)) { perror("bind/listen"); exit(1); }
    return s;
}

/* Counts complete request heads in the buffer and drops them. */
static size_t take_requests(struct conn *c) {
    size_t n = 0, start = 0;
    for (size_t i = 3; i < c->in_len; i++)
        if (c->in[i] == '\n' && c->in[i - 1] == '\r' && c->in[i - 2] == '\n' && c->in[i - 3] == '\r') {
            n++; start = i + 1;
        }
    memmove(c->in, c->in + start, c->in_len - start);
    c->in_len -= start;
    return n;
}

/* Sends what it can; returns -1 on error, 0 when blocked or done. A large file fills the socket
 * before the next connection's turn (capping each turn at 256 KiB, as lighttpd does, measured
 * slower here: 2.3 against 3.2 GB/s at 10 clients). */
static int flush(struct conn *c) {
    while (c->pending) {
        ssize_t w;
        if (nresps) {
            const char *r = resps[c->turn];
            size_t len = resp_lens[c->turn];
            w = send(c->fd, r + c->out_off, len - c->out_off, MSG_NOSIGNAL);
            if (w < 0) return (errno == EAGAIN) ? 0 : -1;
            c->out_off += w;
            if (c->out_off == len) { c->pending--; c->out_off = 0; c->turn = (c->turn + 1) % nresps; }
            continue;
        }
        if (small) {
            w = send(c->fd, resp + c->out_off, resp_len - c->out_off, MSG_NOSIGNAL);
        } else if (c->out_off < head_len) {
            w = send(c->fd, resp + c->out_off, head_len - c->out_off, MSG_NOSIGNAL | MSG_MORE);
        } else {
            off_t off = c->out_off - head_len;
            w = sendfile(c->fd, file_fd, &off, file_size - off);
        }
        if (w < 0) return (errno == EAGAIN) ? 0 : -1;
        c->out_off += w;
        if (c->out_off == (small ? resp_len : head_len + (size_t)file_size)) { c->pending--; c->out_off = 0; }
    }
    return 0;
}

/* Level-triggered: one recv per readable event (a short read means the socket is drained, so no
 * second recv to see EAGAIN), answers written at once, EPOLLOUT asked for only while a send
 * is blocked. */
static void *worker(void *arg) {
    (void)arg;
    int ls = listener(), ep = epoll_create1(0), one = 1, lowat = 16 * 1024;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}, evs[MAXEV];
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    for (;;) {
        int n = epoll_wait(ep, evs, MAXEV, -1);
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (!c) {
                int fd;
                while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat);
                    c = calloc(1, sizeof *c);
                    c->fd = fd;
                    c->turn = nresps ? ((size_t)fd * 7919) % nresps : 0;
                    struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
                }
                continue;
            }
            int dead = 0;
            if (evs[i].events & EPOLLIN) {
                ssize_t r = recv(c->fd, c->in + c->in_len, sizeof c->in - c->in_len, 0);
                if (r > 0) {
                    c->in_len += r;
                    c->pending += take_requests(c);
                    if (c->in_len == sizeof c->in) dead = 1;
                } else if (r == 0 || errno != EAGAIN) {
                    dead = 1;
                }
            }
            if (!dead && flush(c) < 0) dead = 1;
            if (dead || (evs[i].events & (EPOLLHUP | EPOLLERR))) { close(c->fd); free(c); continue; }
            /* ask for writability only while an answer waits on a full socket */
            if ((c->pending != 0) != c->want_out) {
                c->want_out = c->pending != 0;
                struct epoll_event e = {.events = EPOLLIN | (c->want_out ? EPOLLOUT : 0), .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: limitd PORT FILE|DIR [THREADS]\n"); return 2; }
    signal(SIGPIPE, SIG_IGN); /* sendfile() to a closed peer raises it; MSG_NOSIGNAL covers send() only */
    port = atoi(argv[1]);
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    file_fd = open(argv[2], O_RDONLY);
    struct stat st;
    if (file_fd < 0 || fstat(file_fd, &st)) { perror(argv[2]); return 1; }
    if (S_ISDIR(st.st_mode)) {
        if (load_dir(argv[2])) return 1;
        goto serve;
    }
    file_size = st.st_size;
    small = file_size <= SMALL_MAX;
    char head[256];
    head_len = snprintf(head, sizeof head,
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %lld\r\n"
        "Accept-Ranges: bytes\r\nDate: Tue, 01 Dec 2026 00:00:00 GMT\r\n\r\n", (long long)file_size);
    resp_len = head_len + (small ? (size_t)file_size : 0);
    resp = malloc(resp_len);
    memcpy(resp, head, head_len);
    if (small && pread(file_fd, resp + head_len, file_size, 0) != file_size) { perror("read"); return 1; }
serve:;
    pthread_t t[64];
    for (int i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, worker, NULL);
    pthread_join(t[0], NULL);
    return 0;
}
