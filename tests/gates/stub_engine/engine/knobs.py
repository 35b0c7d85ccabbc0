"""Bugs the gate runner's tests plant by editing this file in a commit."""

OUTPUT_SALT = ""  # non-empty: every output changes (flags unset == main fails)
BATCH_BUG = False  # True: concurrent runs (parallel > 1, not --serial) change tokens
LEAK_PAGES = 0  # pages left in use at idle when paging is on
DRAFT_BUG = False  # True: a drafter changes tokens
RESUME_BUG = False  # True: a request whose prompt prefix is cached changes tokens
MAX_PARALLEL = 64  # more lanes are refused as bad input (exit 2), as the real engine does
REFUSE_KV = ""  # a kv dtype `run` refuses as bad input (exit 2)
CRASH_KV = ""  # a kv dtype on which `run` crashes (exit 3)
RAISE_KV = ""  # a kv dtype on which `run` raises (a Python traceback, exit 1)
HANG_KV = ""  # a kv dtype on which `run` hangs
HANG_FILE = ""  # if set, HANG_KV hangs only while this file exists, marked by FILE.hanging.PID
NO_KV = ()  # kv dtypes missing from capabilities
FAIL_CAPABILITIES = False
REQUIRE_MODULE = ""  # a module `run` imports first (per-commit environments)
CUPY_INFO = {}  # capabilities' backend_info["cupy"] (contract 4): provenance facts
ARCHITECTURES = None  # a list: capabilities' "architectures" (None: the key is absent)
MOE_BUG = False  # True: concurrent runs on a model whose config has num_experts change tokens
CONTRACT = 1  # capabilities' "contract"
