/* A stand-in PJRT plugin for tests/test_accelerator_rules.py: GetPjrtApi() returns a PJRT_Api table laid out as
 * xla/pjrt/c/pjrt_c_api.h lays it out (40-byte header, then one function pointer per C API function), with the
 * few functions xlakit's PJRT reset calls. fake_configure() sets the version and table size it reports, so the
 * tests can check that an older or smaller table is refused before anything is called. */
#include <stddef.h>
#include <string.h>

typedef struct { size_t struct_size; void* extension_start; int major; int minor; } Version;
typedef struct { size_t struct_size; void* extension_start; Version version; void* functions[200]; } Api;

typedef struct { size_t struct_size; void* ext; void* client; const char* name; size_t size; } PlatformNameArgs;
typedef struct { size_t struct_size; void* ext; void* client; void** devices; size_t count; } DevicesArgs;
typedef struct { size_t struct_size; void* ext; void* device; void* description; } DescriptionArgs;
typedef struct { size_t struct_size; void* ext; void* description; int id; } IdArgs;
typedef struct { size_t struct_size; void* ext; void* device; } DeviceArgs;

static Api api;
static int minor = 112, functions = 138, clears = 0;
static const char* platform = "tpu";
static int device_ids[2] = {0, 1};
static void* devices[2] = {&device_ids[0], &device_ids[1]};

static void error_destroy(void* args) { (void)args; }
static void error_message(void* args) { (void)args; }
static void* platform_name(PlatformNameArgs* a) { a->name = platform; a->size = strlen(platform); return NULL; }
static void* addressable_devices(DevicesArgs* a) { a->devices = devices; a->count = 2; return NULL; }
static void* get_description(DescriptionArgs* a) { a->description = a->device; return NULL; }
static void* description_id(IdArgs* a) { a->id = *(int*)a->description; return NULL; }
static void* clear_memory_stats(DeviceArgs* a) { if (a->device == devices[1]) clears++; return NULL; }

const Api* GetPjrtApi(void) {
  memset(&api, 0, sizeof api);
  api.struct_size = 40 + 8 * (size_t)functions;
  api.version.struct_size = sizeof(Version);
  api.version.minor = minor;
  api.functions[0] = (void*)error_destroy;
  api.functions[1] = (void*)error_message;
  api.functions[12] = (void*)platform_name;
  api.functions[16] = (void*)addressable_devices;
  api.functions[23] = (void*)description_id;
  api.functions[29] = (void*)get_description;
  if (functions > 135) api.functions[135] = (void*)clear_memory_stats;
  return &api;
}

void fake_configure(int new_minor, int new_functions, const char* new_platform) {
  minor = new_minor; functions = new_functions; platform = new_platform;
}
int fake_clears(void) { return clears; }
