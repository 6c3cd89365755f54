/* simt_account.cc: the emulated device's account (simt_account.h): the
 * tables behind one lock, the footprint a launcher declares for its next
 * launch (per OS thread), BK_EMU_COUNT, and the printing, which names a
 * wait's call site from the program's own symbol table (/proc/self/exe's
 * .symtab, static functions included), read once. */
#include "emu/simt/simt_account.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace
{

bk_emu_account empty_account(int64_t step)
{
    bk_emu_account a;
    memset(&a, 0, sizeof a);
    a.step = step;
    return a;
}

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
bk_emu_account g_account = empty_account(-1);
int g_counting = 1; /* 0 between a step's end and the next beginning */
int g_print = -1;   /* BK_EMU_COUNT set: print at every step's end; -1 not read yet */
int g_skip = 0;     /* BK_EMU_COUNT=skip, or set_skip */
__thread bk_emu::footprint t_pending;

struct lock_guard {
    lock_guard() { pthread_mutex_lock(&g_lock); }
    ~lock_guard() { pthread_mutex_unlock(&g_lock); }
};

/* BK_EMU_COUNT, once (the lock held). */
void read_setting(void)
{
    if (g_print >= 0) return;
    const char *v = getenv("BK_EMU_COUNT");
    g_print = v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
    if (v != NULL && strcmp(v, "skip") == 0) g_skip = 1;
}

/* The kernel's row, added when new; NULL when the table is full. */
bk_emu_kernel_count *kernel_row(const char *name)
{
    bk_emu_account &a = g_account;
    for (int i = 0; i < a.n_kernels; i++)
        if (strcmp(a.kernels[i].name, name) == 0) return &a.kernels[i];
    if (a.n_kernels == BK_EMU_ACCOUNT_KERNELS) return NULL;
    bk_emu_kernel_count *k = &a.kernels[a.n_kernels++];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", name);
    return k;
}

bk_emu_wait_site *wait_row(bk_emu_wait_kind kind, const char *entry, const void *caller)
{
    bk_emu_account &a = g_account;
    for (int i = 0; i < a.n_wait_sites; i++) {
        bk_emu_wait_site *w = &a.wait_sites[i];
        if (w->kind == kind && w->entry == entry && w->caller == caller) return w;
    }
    if (a.n_wait_sites == BK_EMU_ACCOUNT_WAIT_SITES) return NULL;
    bk_emu_wait_site *w = &a.wait_sites[a.n_wait_sites++];
    *w = bk_emu_wait_site{kind, entry, caller, 0};
    return w;
}

/* ---------------------------------------------------------------- call sites by name */

/* The program's symbol table, mapped from /proc/self/exe, and how far the
 * program was moved when loaded (a position-independent executable). */
struct symbol_table {
    const Elf64_Sym *syms = NULL;
    size_t n = 0;
    const char *names = NULL;
    size_t names_bytes = 0;
    uintptr_t bias = 0;
};

int first_object_bias(struct dl_phdr_info *info, size_t, void *bias)
{
    *static_cast<uintptr_t *>(bias) = info->dlpi_addr; /* the first object is the program */
    return 1;
}

/* The .symtab of the ELF image [image, image + size), or an empty table. */
symbol_table find_symtab(const unsigned char *image, size_t size)
{
    symbol_table t;
    const Elf64_Ehdr *eh = reinterpret_cast<const Elf64_Ehdr *>(image);
    if (size < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
        eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_shoff == 0 ||
        eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > size)
        return t;
    const Elf64_Shdr *sh = reinterpret_cast<const Elf64_Shdr *>(image + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
        const Elf64_Shdr &str = sh[sh[i].sh_link];
        if (sh[i].sh_offset + sh[i].sh_size > size || str.sh_offset + str.sh_size > size) break;
        t.syms = reinterpret_cast<const Elf64_Sym *>(image + sh[i].sh_offset);
        t.n = sh[i].sh_size / sizeof(Elf64_Sym);
        t.names = reinterpret_cast<const char *>(image + str.sh_offset);
        t.names_bytes = str.sh_size;
        break;
    }
    return t;
}

symbol_table load_symbols(void)
{
    symbol_table none;
    int fd = open("/proc/self/exe", O_RDONLY);
    struct stat st;
    if (fd < 0) return none;
    void *image = fstat(fd, &st) == 0
                      ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0)
                      : MAP_FAILED;
    close(fd);
    if (image == MAP_FAILED) return none;
    symbol_table t = find_symtab(static_cast<const unsigned char *>(image), (size_t)st.st_size);
    dl_iterate_phdr(first_object_bias, &t.bias);
    return t; /* mapped for the life of the process */
}

/* "function+0xoffset" for a code address, or "0xaddress" when no function
 * of the program's symbol table holds it. */
void name_address(const void *p, char *buf, size_t len)
{
    static const symbol_table table = load_symbols();
    uintptr_t at = reinterpret_cast<uintptr_t>(p) - table.bias;
    for (size_t i = 0; i < table.n; i++) {
        const Elf64_Sym &s = table.syms[i];
        if (ELF64_ST_TYPE(s.st_info) != STT_FUNC || at < s.st_value ||
            at >= s.st_value + s.st_size || s.st_name >= table.names_bytes)
            continue;
        snprintf(buf, len, "%s+0x%lx", table.names + s.st_name, (unsigned long)(at - s.st_value));
        return;
    }
    snprintf(buf, len, "%p", p);
}

const char *wait_kind_name(bk_emu_wait_kind kind)
{
    static const char *const names[BK_EMU_WAIT_KINDS] = {"stream", "copy", "event", "device",
                                                         "query"};
    return kind >= 0 && kind < BK_EMU_WAIT_KINDS ? names[kind] : "?";
}

} // namespace

/* ---------------------------------------------------------------- counting */

void bk_emu::declare_footprint(int64_t read_bytes, int64_t written_bytes, int64_t flops,
                               int arithmetic)
{
    t_pending = footprint{read_bytes, written_bytes, flops, 1, arithmetic};
}

bk_emu::footprint bk_emu::take_footprint(void)
{
    footprint fp = t_pending;
    t_pending = footprint{0, 0, 0, 0, 0};
    return fp;
}

void bk_emu::account_launch(const char *name, const footprint &fp)
{
    lock_guard hold;
    if (!g_counting) return;
    bk_emu_account &a = g_account;
    a.launches++;
    a.undeclared += !fp.declared;
    a.read_bytes += fp.read_bytes, a.written_bytes += fp.written_bytes, a.flops += fp.flops;
    bk_emu_kernel_count *k = kernel_row(name);
    if (k == NULL) {
        a.unlisted++;
        return;
    }
    k->launches++;
    k->undeclared += !fp.declared;
    k->read_bytes += fp.read_bytes, k->written_bytes += fp.written_bytes, k->flops += fp.flops;
}

void bk_emu::account_copy(int dir, size_t bytes)
{
    lock_guard hold;
    if (!g_counting || dir < 0 || dir >= BK_EMU_COPY_DIRECTIONS) return;
    g_account.copies[dir]++;
    g_account.copy_bytes[dir] += (int64_t)bytes;
}

void bk_emu::account_wait(bk_emu_wait_kind kind, const char *entry, const void *caller)
{
    lock_guard hold;
    if (!g_counting) return;
    g_account.waits += kind != BK_EMU_WAIT_QUERY;
    g_account.waits_by_kind[kind]++;
    bk_emu_wait_site *w = wait_row(kind, entry ? entry : "?", caller);
    if (w)
        w->count++;
    else
        g_account.unlisted++;
}

/* ---------------------------------------------------------------- the C interface */

extern "C" void bk_emu_account_reset(int64_t step)
{
    lock_guard hold;
    g_account = empty_account(step);
    g_counting = 1;
}

extern "C" void bk_emu_account_get(bk_emu_account *out)
{
    lock_guard hold;
    *out = g_account;
}

extern "C" void bk_emu_account_close(void)
{
    static bk_emu_account closed; /* printed outside the lock */
    {
        lock_guard hold;
        read_setting();
        g_counting = 0;
        if (!g_print) return;
        closed = g_account;
    }
    bk_emu_account_print(stdout, &closed);
    fflush(stdout);
}

extern "C" void bk_emu_account_print(FILE *out, const bk_emu_account *a)
{
    fprintf(out,
            "emu account step=%lld launches=%lld undeclared=%lld read=%lld written=%lld "
            "flops=%lld h2d=%lld h2d_bytes=%lld d2h=%lld d2h_bytes=%lld d2d=%lld d2d_bytes=%lld "
            "waits=%lld stream=%lld copy=%lld event=%lld device=%lld queries=%lld unlisted=%lld\n",
            (long long)a->step, (long long)a->launches, (long long)a->undeclared,
            (long long)a->read_bytes, (long long)a->written_bytes, (long long)a->flops,
            (long long)a->copies[0], (long long)a->copy_bytes[0], (long long)a->copies[1],
            (long long)a->copy_bytes[1], (long long)a->copies[2], (long long)a->copy_bytes[2],
            (long long)a->waits, (long long)a->waits_by_kind[BK_EMU_WAIT_STREAM],
            (long long)a->waits_by_kind[BK_EMU_WAIT_COPY],
            (long long)a->waits_by_kind[BK_EMU_WAIT_EVENT],
            (long long)a->waits_by_kind[BK_EMU_WAIT_DEVICE],
            (long long)a->waits_by_kind[BK_EMU_WAIT_QUERY], (long long)a->unlisted);
    for (int i = 0; i < a->n_kernels; i++) {
        const bk_emu_kernel_count *k = &a->kernels[i];
        fprintf(out,
                "emu account kernel launches=%lld read=%lld written=%lld flops=%lld "
                "undeclared=%lld name=%s\n",
                (long long)k->launches, (long long)k->read_bytes, (long long)k->written_bytes,
                (long long)k->flops, (long long)k->undeclared, k->name);
    }
    for (int i = 0; i < a->n_wait_sites; i++) {
        const bk_emu_wait_site *w = &a->wait_sites[i];
        char caller[160];
        name_address(w->caller, caller, sizeof caller);
        fprintf(out, "emu account wait count=%lld kind=%s entry=%s caller=%s\n",
                (long long)w->count, wait_kind_name(w->kind), w->entry, caller);
    }
}

extern "C" int bk_emu_account_skipping(void)
{
    lock_guard hold;
    read_setting();
    return g_skip;
}

extern "C" void bk_emu_account_set_skip(int on)
{
    lock_guard hold;
    read_setting();
    g_skip = on != 0;
}
