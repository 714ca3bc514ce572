"""Provenance of the public traces: where each file comes from, its licence, citation and checksum.

Every trace the loaders read lives in the data directory (see :mod:`traces.data`), never in this
repository. This module records, for each public source, the exact files with their size in bytes
and SHA-256 digest, and a download URL pinned to the upstream commit the files were taken from, so
``python -m traces.download`` can fetch them and ``verify`` can prove a data directory holds
byte-identical copies. The full schemas and statistics are in ``traces-raw/SOURCES.md``.

Run ``python -m traces.sources [--data-dir D]`` to list the sources and the state of each file.
:func:`require_file` is how a loader finds one: its path, or an error naming the source it
belongs to and how to fetch it.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from traces.data import DataDirNotFoundError
from traces.data import data_dir as resolve_data_dir

#: Base URL of raw files on GitHub; download URLs are ``RAW_GITHUB/<owner>/<repo>/<commit>/<path>``.
RAW_GITHUB = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class SourceFile:
    """One file of a public trace.

    :param relpath: path inside the data directory, ``<source name>/<file>`` (POSIX separators).
    :param sha256: SHA-256 digest of the file, 64 lowercase hex digits.
    :param bytes: file size in bytes.
    :param url: direct download URL, pinned to the upstream commit.
    """

    relpath: str
    sha256: str
    bytes: int
    url: str


@dataclass(frozen=True)
class TraceSource:
    """A public trace: a set of files from one upstream repository.

    :param name: short name, also the sub-directory of the data directory holding its files.
    :param description: one line saying what the trace is.
    :param url: web page of the upstream files, pinned to the commit they were taken from.
    :param licence: licence of the files (SPDX id where there is one), with any caveat.
    :param citation: what to cite when results use the trace.
    :param files: the files, each with size and checksum.
    """

    name: str
    description: str
    url: str
    licence: str
    citation: str
    files: tuple[SourceFile, ...]


def _github(
    name: str,
    repo: str,
    commit: str,
    root: str,
    renamed: Mapping[str, str] | None = None,
    flatten: bool = False,
) -> tuple[SourceFile, ...]:
    """Build the file list of a source copied from a GitHub repository, from :data:`_CHECKSUMS`.

    :param name: source name (the data sub-directory); its files are the table rows under it.
    :param repo: ``owner/repository`` on GitHub.
    :param commit: full commit hash the files were taken from.
    :param root: directory of the files inside the repository (``""`` for the top).
    :param renamed: path under ``name`` -> path under ``root``, for files that were renamed.
    :param flatten: the files sit directly in ``root`` upstream but in sub-directories here.
    """
    files = []
    for line in _CHECKSUMS.splitlines():
        digest, size, relpath = line.split()
        top, _, local = relpath.partition("/")
        if top != name:
            continue
        remote = (renamed or {}).get(local, local.rsplit("/", 1)[-1] if flatten else local)
        path = f"{root}/{remote}" if root else remote
        files.append(SourceFile(relpath, digest, int(size), f"{RAW_GITHUB}/{repo}/{commit}/{path}"))
    if not files:
        raise RuntimeError(f"no checksum rows for source {name!r} in _CHECKSUMS")
    return tuple(files)


def _tree(repo: str, commit: str, root: str) -> str:
    return f"https://github.com/{repo}/tree/{commit}/{root}"


#: ``sha256  bytes  relpath`` of every file, computed from the copies described in
#: ``traces-raw/SOURCES.md``; ``relpath`` is relative to the data directory.
_CHECKSUMS = """\
b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df  3029533  mooncake/conversation_trace.jsonl
bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131  1136313  mooncake/synthetic_trace.jsonl
54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6   320117  azure_llm_2023/AzureLLMInferenceTrace_code.csv
cd371571bef3320907147f8901729e37f412aafb067ec8eb153e2828e1801e65  1923473  ragpulse/0_trace.jsonl
e7bf9bc66493629fa279d67ffb9d6a44e4ec3a7ac60549f5c679319c54564f6d   315609  ragpulse/1_sys_prompt.jsonl
8575941cab2eb1cae25e589b7fab3ccb6affc3809e4156b1dc6db40d9e65b891   347002  ragpulse/2_passages.jsonl
fdd9b1ca962c2b4d0f48785497007e20aa961442eb93cb1afbe3f23c383ae467   210541  ragpulse/3_history.jsonl
5adeff33a44850f5a1c0892aaaf7000114d7ac24821d4238175abb92b77dd12d   278133  ragpulse/4_user_input.jsonl
5e4cba4e2e449eb1a26c1c94aa57a59204f29c8ed0395da03cf0f43b7d75891c    23972  ragpulse/5_web_search.jsonl
93d0085a18cb7d62696c6ff883baf673046eebb6fa995cec34924bf797267082  1146978  servegen_deepseek_r1/dataset/chunk-35-dataset.json
0b79451d62e0b6d348baaf2bcb909b98a33596227da168db973738d11f1a0b64   240016  servegen_deepseek_r1/dataset/chunk-48-dataset.json
7473f4b3cd1fda824029ce61fecb4610a743e3141eeff7f90a93def35d9197fd     4135  servegen_deepseek_r1/trace/chunk-0-trace.csv
922c9730fb8754f8adb89a40877ee4151fce07cfa02d7f5c2eac3f5a1ba9ec3c     9798  servegen_deepseek_r1/trace/chunk-1-trace.csv
d995cbf84e3815b88ae6c16ca2f1412a2e04e5bd98ddaf3afba2c47246b19e25     2342  servegen_deepseek_r1/trace/chunk-2-trace.csv
85f28d5b39473ad8aa4fbbf51f3fcc344863ebaa273e04f76e02f940f93c9257     3167  servegen_deepseek_r1/trace/chunk-3-trace.csv
38439e945b84b7c3cff6c1c1fc76f3bca9325fc41a8481e9a10f5c4f5667c4d4     2345  servegen_deepseek_r1/trace/chunk-4-trace.csv
946180e0dd2edcc73f4b85786edb033bcd8de555b8d9a2465f9a1ce46a384dc9    11239  servegen_deepseek_r1/trace/chunk-5-trace.csv
b5b28e4c168ca96c298b43752f51c20e5b8ae4817134736de4add5edf32663ca     2418  servegen_deepseek_r1/trace/chunk-6-trace.csv
ff6fc461a23e112a02549e50bb41cc7777f5bb79e1c0275fdd28b32e91a65ad8     2758  servegen_deepseek_r1/trace/chunk-7-trace.csv
a9920507e4d797755b05d20105b28ee708009080c0f8a4064116f733f7f42a02     2945  servegen_deepseek_r1/trace/chunk-8-trace.csv
dd714e14a647fcb8cc2e151538a433552035bc898e459f8b6ce17747214f216c     2415  servegen_deepseek_r1/trace/chunk-9-trace.csv
314358468364006c4df1d748dfca66b63d54951fa60e8cfda16dc13ed9077e1c     2407  servegen_deepseek_r1/trace/chunk-10-trace.csv
9aa31c51994a5b451dd841aff1e59ca6dd122c8b4cb4f65f593e54c4935f907e     5258  servegen_deepseek_r1/trace/chunk-11-trace.csv
901f93305ef8748ded4adca9bad8a3340b1311f27b9112e67fdc1781a4dc607f     4133  servegen_deepseek_r1/trace/chunk-12-trace.csv
03415b13941a340fecc49bc14bbd3cf692335e64d289ce7e371bf0652ef7bf4c     3043  servegen_deepseek_r1/trace/chunk-13-trace.csv
153ebde37fa2216b4b999bf940311f37942d45795f85353f655bd4abbca37004     5374  servegen_deepseek_r1/trace/chunk-14-trace.csv
9000f3d6e6f46f0f35c00bb95919bd9ce5adcee5d54621b1c03f5ecbbccc47e5    11987  servegen_deepseek_r1/trace/chunk-15-trace.csv
989a8eff338229ee1cff7d1c2a5d4f152f23189a9df01491f1fa4e23344ee61c     2495  servegen_deepseek_r1/trace/chunk-16-trace.csv
8e47030b8664d038ab79c83bba4e25c3fac9fd30295238cb67e00559b4e1c8e3     7556  servegen_deepseek_r1/trace/chunk-17-trace.csv
ec807055dcd706aeff0104b86ee289cbaf7090bce8200ceeca0d873dae02d701    12015  servegen_deepseek_r1/trace/chunk-18-trace.csv
a292d0889d5f1546a575bb24b7d74f89b97c350eafea8d2cfb4d8195ea9f0a01    12292  servegen_deepseek_r1/trace/chunk-19-trace.csv
e1dfe08b5d24982c3a0d9de111840a036252e7b6e4b14fcf1047dd2c5cdb52ed    11651  servegen_deepseek_r1/trace/chunk-20-trace.csv
760591b17c526530df3d0982a3f3eda6b8df82930242f4a99811662c45e24960     2430  servegen_deepseek_r1/trace/chunk-21-trace.csv
231b4293aa7ec0c2ce767f56dc45d9e51a925427b90d56076462ce35bc75778f     4794  servegen_deepseek_r1/trace/chunk-22-trace.csv
fef4655c2b62146030119becce1b7ff5a4c358237fde3ed7c1817625f4fd51a8     9484  servegen_deepseek_r1/trace/chunk-23-trace.csv
4e8d9b73aa64f66e0ad6c7dcf4b7f1a50933cebc8c3ed05326ef2abd88e5902f     8191  servegen_deepseek_r1/trace/chunk-24-trace.csv
2f0c808172bce3838641bf4f0b7636b8440c9699632b6ae887bd073e1031a555     2480  servegen_deepseek_r1/trace/chunk-25-trace.csv
e8ee3dec5cf7c344584f081717f0e06d520cf3542854685681eea63e89b76378     4095  servegen_deepseek_r1/trace/chunk-26-trace.csv
7b31033f924f1af52eadf78fab45c6544d9c79bc4cd88b88a31abddc25f01bc0     5104  servegen_deepseek_r1/trace/chunk-27-trace.csv
8e9fff4984083d6a607001a5696b0bcd69c2f2bb4047c353cf664a28c7a2e7d3     5898  servegen_deepseek_r1/trace/chunk-28-trace.csv
6ca219eef94ca46360feaef44ac8e77d385ab69ca70b38f4562d4b441ec25134     3011  servegen_deepseek_r1/trace/chunk-29-trace.csv
65f190116f6864a3f0bf90acf7936f244bef99212db803538a346ca551d3d176    10812  servegen_deepseek_r1/trace/chunk-30-trace.csv
0640035f07dbe4b81d7d00c8f06313857971c62601eca748bb0b96b741f5c21e     2421  servegen_deepseek_r1/trace/chunk-31-trace.csv
5ac7e958e28154b4ad092e4dda2b2f1771e72a7a7eca71bb215061e37745fd54     2342  servegen_deepseek_r1/trace/chunk-32-trace.csv
5604ce0d58e68ca0979bdc53ff1deb522b3a9b0e12978f2035d597547f59b6c3     2841  servegen_deepseek_r1/trace/chunk-33-trace.csv
8e86a7d1de11682b30d31f2282ce45f0fd753e14232cf6828497ac489b9bf383     2431  servegen_deepseek_r1/trace/chunk-34-trace.csv
9924f57c93ac8972dabc15f9dba24fe48c0f143337e33b685abc5bd77a7e2155    10349  servegen_deepseek_r1/trace/chunk-35-trace.csv
746ce5a2d5da691efeb725e78a28018c468842adbd61528625c417a4c80602d9     2696  servegen_deepseek_r1/trace/chunk-36-trace.csv
0dd3b9e4e0a753d25ac9363566e73f158803d6982f3d52da839bd961d0a9917f     8889  servegen_deepseek_r1/trace/chunk-37-trace.csv
b37bf0fa58a13f9a8cb3d6ee64ea778aa104de1dfadb63396e31e19d255d09ad     9126  servegen_deepseek_r1/trace/chunk-38-trace.csv
1f258f97d9f04c37161266087f75365a3d0393c545bf3d2e0cec19cd817b0899     2493  servegen_deepseek_r1/trace/chunk-39-trace.csv
72f6163c60e15827697846246d134677c28dd17e027fe5fd5716413280140af4     2396  servegen_deepseek_r1/trace/chunk-40-trace.csv
5c298e82431c02c1507b316679b5fbcdfb22d1e012eb5ce675c653531479b629     4700  servegen_deepseek_r1/trace/chunk-41-trace.csv
aa4bade5d6c3979e8e2137702702c55c72ddf914717136c71069a414e5a90453     2418  servegen_deepseek_r1/trace/chunk-42-trace.csv
ea6dd2f6cbda1c2b392c29ce112ac02da5f18e4942cefc352bf47e6889e3100a     5964  servegen_deepseek_r1/trace/chunk-43-trace.csv
89fadeab26e86a071b705d593866d92c49a043aedac6d20a0a925574fa97151d     2901  servegen_deepseek_r1/trace/chunk-44-trace.csv
29b817eeca368e94dee1ef24452d16d31fc280505aa0388a8e27fb95655df85e     3542  servegen_deepseek_r1/trace/chunk-45-trace.csv
f1cd22803ce158895d8b87dff447aec38ab0ca8ae6a7cd6ecb4d18c0e33eb5df     3103  servegen_deepseek_r1/trace/chunk-46-trace.csv
6a6918f36745c80a5c42301622fee3775364c1d70e29444f89d3c54b43d57a83     4391  servegen_deepseek_r1/trace/chunk-47-trace.csv
5f38d003af414291bca2766e745f2c6653866dba6ef92a94d1ac8386fdfa7638     6521  servegen_deepseek_r1/trace/chunk-48-trace.csv
a0abb205688f288a45081363e75cc75455f01d9ffe03cbe6d3f325fa2b888c8e     4567  servegen_deepseek_r1/trace/chunk-49-trace.csv
718facf5952a82aa7af3ac06d7fb89921a55e2f95fd68140cd478c6bf9135356     3393  servegen_deepseek_r1/trace/chunk-50-trace.csv
ae7acdf1e28b73721afe5619166f743385ddababfd9994f5b84a6d94ca8e5e2d     2414  servegen_deepseek_r1/trace/chunk-51-trace.csv
5b6f38997a2ebda486b65e32a99120ad377b6d1ce9a2c06d6d2d3791fba04be6     2341  servegen_deepseek_r1/trace/chunk-52-trace.csv
45a29445eae3f88a3deadbbf7218ffb48484afa51a3e82cef5b836c83ce2484e     8100  servegen_deepseek_r1/trace/chunk-53-trace.csv
9ea1544c91be59fc0b83207e7e52d656de9084d442f02f40b62a056e5cb68a55     5720  servegen_deepseek_r1/trace/chunk-54-trace.csv
27bf9346fd8bdea2f5fb3abe17b2d81b8feaa9622d2aa28aed6ffeee57afcc7d     2509  servegen_deepseek_r1/trace/chunk-55-trace.csv
a762b5d8c5278a5374be1a6ed5cdb33200c35f9e0016312d5ed20e597e82c21d     5252  servegen_deepseek_r1/trace/chunk-56-trace.csv
e0361c13604dbda5c7e1e4c29ef25f0888c6fc5ffc03f78dcba156cf8e25f2f9     2607  servegen_deepseek_r1/trace/chunk-57-trace.csv
f0b7ae83d6299a38a1a0cdc1d61bdaec04a705458b8c2cf98d67d7c55abc8908     2531  servegen_deepseek_r1/trace/chunk-58-trace.csv
809a817d9bae5387a9e2c245f93d343c3743b93bba5617013c427108ffb291d1     2759  servegen_deepseek_r1/trace/chunk-59-trace.csv
36b91a72ac647e015ec8fbee04bdb9167647a976ab6d9d83810031cb76fbed83     2494  servegen_deepseek_r1/trace/chunk-60-trace.csv
3983ebe82be4c375745d8c34f7317c6ef7d310e62e7ae70de50e2f19dbc8d378     4000  servegen_deepseek_r1/trace/chunk-61-trace.csv
8444ccd0f18a8d2b6bfa0209280aee561ff548d03448bbd06646dfca04e34412     8501  servegen_deepseek_r1/trace/chunk-62-trace.csv
cf68410969af73c756923819215aed1776b5df107aae9def431da9f32d4e2435     5606  servegen_deepseek_r1/trace/chunk-63-trace.csv
5090a18167d2c84353774c45b0f009d8602c2274714d7db7ca1812082f40b13d     2981  servegen_deepseek_r1/trace/chunk-64-trace.csv
ea64e41abe409ef3af89a85406c58b1ad4a1eb2ca11084b35b3d9e70ed4e3598    11379  servegen_deepseek_r1/trace/chunk-65-trace.csv
db24b95a6e425f5268cf304b7b9bd2e7024fb4d8b3bd02b415921bd09b339130    12252  servegen_deepseek_r1/trace/chunk-66-trace.csv
29952dc3daafba0d5932c78f4375f4884f30a8b826c9a389f677d2997fb97cdd     2405  servegen_deepseek_r1/trace/chunk-67-trace.csv
8842ecf0898f03c2377edb89919f37094b78dd101bacaed5cada716e39c1942f     8156  servegen_deepseek_r1/trace/chunk-68-trace.csv
3018b43d81c2ce15ef957d6d168529bbf78bf1a0a5f190ebd7d6ec191f15fa5d     2356  servegen_deepseek_r1/trace/chunk-69-trace.csv
e54759257c13a5ced859b0185da2fecc3210189eb962b455335e8237ee329eae    12050  servegen_deepseek_r1/trace/chunk-70-trace.csv
e91fff747ebe1bd741b564e76903deeef58b78fcfd0fdfc8bfeed11a24445c3d     3178  servegen_deepseek_r1/trace/chunk-71-trace.csv
5a834964ca584e921bd7bb221b6cafc91d2ccacbf5105df8ee2e6115249bfb67     4508  servegen_deepseek_r1/trace/chunk-72-trace.csv
9d3580538d915ca75e4aaaa54590b42dbb17abc6d74c8913310cf07c232adcdc   884932  etalon_length_stats/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv
389419d2f2e55149b5d6ccfedb881572798d39650436ab86fd61f3c40337a990  1123791  etalon_length_stats/bwb_stats_llama2_tokenizer_filtered_v2.csv
6d6c296302a853e2669a674a96f269283e60c57e60363bd450588a1066919f9f   949600  etalon_length_stats/sharegpt_8k_filtered_stats_llama2_tokenizer.csv
68bf784305d30824de71732c59e53ebb00780e4fd136b0382cd7dee7f08ea5d3   863133  sharegpt_mlenergy/ShareGPT_V3_filtered_1000.json
6c26e9fdc3350cf596e6d1ea9c179cbff834761bccf562f4141ed29a839ca421    15649  bfcl_v4_data/BFCL_v4_live_parallel.json
21d4b9319c1faac431e22757b367ea28917fe467364c3a4b17f16ec06d4f6e79    82332  bfcl_v4_data/BFCL_v4_live_parallel_multiple.json
1a21a995d06fd6f20ba55de7bced30ef953ec35e998f502ec2ecf4d66ef1c43a   390425  bfcl_v4_data/BFCL_v4_multi_turn_base.json
78c3268c5cc8e97c0f4ec6c811b3b9a2bba14323b1830b7a874b06d822749324   392016  bfcl_v4_data/BFCL_v4_multi_turn_long_context.json
87d28ce10e37d864b72de85d5732eef2a867b241d6c1c99b4ae682c9e3ea921c   401159  bfcl_v4_data/BFCL_v4_multi_turn_miss_func.json
f0c66dda3795f5f53e3e1c0cc8ba0246b6761c8f58bdba8317203bf451ab8838   402974  bfcl_v4_data/BFCL_v4_multi_turn_miss_param.json
aef168155ebd74b7ac2401198b201343bc7d16d7a3d7e0d4e6d8ee82c6969b2a   316583  bfcl_v4_data/BFCL_v4_multiple.json
19f51a82eff42e5d62541aa500115a056eb78f437c2ba1f10415fd7c8e5dda84   171896  bfcl_v4_data/BFCL_v4_parallel.json
8863ea8433239f55c5f016154cf0830853c89f693c6ea270396a2fa121960579   347080  bfcl_v4_data/BFCL_v4_parallel_multiple.json
6fc41d96d003dc849028966a782923560d2fc127ed2088aa967f06daaafa4268    36984  bfcl_v4_data/BFCL_v4_web_search.json
c4c1b741c71e2a17c97a5dc9c4a91d89978c4eaece56494d14272d5df6c650e9    13953  bfcl_v4_data/multi_turn_func_doc/gorilla_file_system.json
83fa31708c89442bdcf12ac4dfbe3be8663ec9183a1b1524a9fda98164bc7e0b     9158  bfcl_v4_data/multi_turn_func_doc/math_api.json
96480cd9cbd3d4a34cd8f78879bc6622731768a26e080f7a34782e36e3402287     9087  bfcl_v4_data/multi_turn_func_doc/memory_kv.json
4ceff946df00983c7f0b95d1b70ae402247f3312fb898bac9ecfa1de52f5a783     2501  bfcl_v4_data/multi_turn_func_doc/memory_rec_sum.json
917908ca99fdd01e203274b7ec6eb2347fa91d57f3c6341e20945cc9c9d746cf     7287  bfcl_v4_data/multi_turn_func_doc/memory_vector.json
4d58ea933a5d2b280d7a52366617fb47fecd333d7b0e08e724db6fa12fb5f847     6027  bfcl_v4_data/multi_turn_func_doc/message_api.json
87f9fc404a06e4107d7c366f1399c596440e84c16cb119faf374b2f532d86e8b    10573  bfcl_v4_data/multi_turn_func_doc/posting_api.json
31324e0380782664fe82ba05bd23517808ad55692b45a5fe7c3d4d395fe4f0f8     6648  bfcl_v4_data/multi_turn_func_doc/ticket_api.json
1a7933fd8f0cb8fbec38aeae05cb8c24132747cad4904fe1c13ac3d01fc22c2d    12608  bfcl_v4_data/multi_turn_func_doc/trading_bot.json
f17b950c13adddf41d0848077df58788252e4c2e7cad5cfa71c8c4bf04f57b26    16979  bfcl_v4_data/multi_turn_func_doc/travel_booking.json
0c8a66292844874ef7b168f343bc394d8615d2d9e1f4387999a9ee23011eac78    17545  bfcl_v4_data/multi_turn_func_doc/vehicle_control.json
61fcee411e35f7ff67415e18cd67276615cf06e1c8841a683d2d997dbb46eac5     2252  bfcl_v4_data/multi_turn_func_doc/web_search.json
8a9f189ff0e832ebbbbdade1fd95a7dbcc67406e9177df3f0aad76f59ab00350     4972  bfcl_v4_data/possible_answer/BFCL_v4_live_parallel.json
f5b5f360556c5feb51db46fb9f56ee4b304f4b45b161599bbb14161c98a2873f     7420  bfcl_v4_data/possible_answer/BFCL_v4_live_parallel_multiple.json
1fee67823b317571649177dd89d63969feaae4e810cc7448ee55ba797fb7c8fc    78931  bfcl_v4_data/possible_answer/BFCL_v4_multi_turn_base.json
e82aa0e839c39d23c64a05834f7ae024d7c9738ec21738ecee78dc876e3d0d18   114439  bfcl_v4_data/possible_answer/BFCL_v4_multi_turn_long_context.json
69e679b806d1c871b05393a4b95583bb973248e5b8d96c2d7f4ca05e29fc32e6    80589  bfcl_v4_data/possible_answer/BFCL_v4_multi_turn_miss_func.json
59c442901779e2c31c33abcd566d032e03736e5ad8069de2fe05489873046ecf    80816  bfcl_v4_data/possible_answer/BFCL_v4_multi_turn_miss_param.json
244e00ce9395df948bcafc7bee64e8f9c87ef70887587d83cae45b13699f3047    32254  bfcl_v4_data/possible_answer/BFCL_v4_multiple.json
8a6aa19c1adddc6a5a2f7e40f9dbf30cc7e95815e7b830c90589ab318229e0f0    66005  bfcl_v4_data/possible_answer/BFCL_v4_parallel.json
5ebf24f458c1f16300c05505d83d6f0a1b68b79be273a033febd0d4f840507e3    74602  bfcl_v4_data/possible_answer/BFCL_v4_parallel_multiple.json
771cab45fdad5744563456801d4623a42c5a358f10514b9b9105d2f6052b4999    75962  bfcl_v4_data/possible_answer/BFCL_v4_web_search.json
7f1f6fde6051f147da49c9a9a535237f63801d302eafb66b9e382e85c296018f   448211  parrot_metagpt/log_3_round.jsonl
c5efea8fe9d55d0991567d6d2dccf28a8ccce627cf676c3d948571ecf38e55e0   596785  parrot_metagpt/log_new_rounds.jsonl
efbe4713355fda9607afec5c0927c7d9972e1992142c15fd786ee1e6d38e0719    68104  lats_logs/hotpot_tot_10it.log
4b18fe45184ac67739e179cf7c0badd1b80eff7a554af80ac76dc995795fb530   347431  lats_logs/webshop_lats_example.log
314c49483148fe68e230a683f739e3e6e68d478948ecf342739596f30af36b57    32960  tracelab_example/round_trace.sanitized.jsonl
"""  # noqa: E501

_MOONCAKE = (
    "kvcache-ai/Mooncake",
    "3b5a594133958449a1feaf1c9e0fc1b553e34a28",
    "FAST25-release/traces",
)
_AZURE = ("Azure/AzurePublicDataset", "b469a113cedca53ddc3bdea71a143dc4b7d8700c", "data")
_RAGPULSE = ("flashserve/RAGPulse", "3672232d45d749fdcf45dbc38cc77e5264af4a32", "data")
_SERVEGEN = (
    "alibaba/ServeGen",
    "f891d1189eb32b3868dfc443800c4150548c282a",
    "data/reason/deepseek-r1",
)
_ETALON = (
    "project-etalon/etalon",
    "d5f18de15a2227a2d469365afc4fa9e2df0c631d",
    "data/processed_traces",
)
_MLENERGY = ("ml-energy/leaderboard-v2", "6244952578285bd9a5dbc837e5a3978c6ca3329e", "sharegpt")
_BFCL = (
    "ShishirPatil/gorilla",
    "6ea57973c7a6097fd7c5915698c54c17c5b1b6c8",
    "berkeley-function-call-leaderboard/bfcl_eval/data",
)
_PARROT = (
    "microsoft/ParrotServe",
    "748a10a89cabbc8f485beb7a2e92a58d6c4f4eb1",
    "artifact/workloads/metagpt",
)
_LATS = ("lapisrocks/LanguageAgentTreeSearch", "853d81614607dd27433faf17c7b0a7d660f95d22", "")
_TRACELAB = ("uw-syfi/TraceLab", "0b8a262ba69602869133b65972d51a388bde45e1", "")

#: Every public trace the loaders know, in the order of ``traces-raw/SOURCES.md``.
SOURCES: tuple[TraceSource, ...] = (
    TraceSource(
        name="mooncake",
        description=(
            "Kimi (Moonshot) production chat requests and a synthetic trace, with 512-token "
            "prefix-block hashes (1 h, 3.4 req/s)"
        ),
        url=_tree(*_MOONCAKE),
        licence="Apache-2.0",
        citation=(
            "Qin et al., 'Mooncake: Trading More Storage for Less Computation - A KVCache-centric "
            "Architecture for Serving LLM Chatbot', USENIX FAST 2025"
        ),
        files=_github("mooncake", *_MOONCAKE),
    ),
    TraceSource(
        name="azure_llm_2023",
        description="Azure LLM inference trace, coding-assistant service, 1 h (Splitwise)",
        url=_tree(*_AZURE),
        licence="CC-BY-4.0",
        citation=(
            "Patel et al., 'Splitwise: Efficient Generative LLM Inference Using Phase Splitting', "
            "ISCA 2024"
        ),
        files=_github("azure_llm_2023", *_AZURE),
    ),
    TraceSource(
        name="ragpulse",
        description=(
            "University Q&A RAG service, 1 week, prompts decomposed into hashed components "
            "(system prompt, passages, history, web search, question)"
        ),
        url=_tree(*_RAGPULSE),
        licence="MIT",
        citation="RAGPulse, arXiv:2511.12979",
        files=_github("ragpulse", *_RAGPULSE),
    ),
    TraceSource(
        name="servegen_deepseek_r1",
        description=(
            "Alibaba Bailian DeepSeek-R1 per-client arrival parameters (73 clients, 600-s windows) "
            "and length distributions of clients 35 and 48 (subset)"
        ),
        url=_tree(*_SERVEGEN),
        licence="Apache-2.0",
        citation="ServeGen, arXiv:2505.09999",
        files=_github("servegen_deepseek_r1", *_SERVEGEN, flatten=True),
    ),
    TraceSource(
        name="etalon_length_stats",
        description=(
            "Per-request prefill/decode lengths (Llama-2 tokenizer) for ShareGPT chat, BWB "
            "translation and arXiv summarization"
        ),
        url=_tree(*_ETALON),
        licence=(
            "Apache-2.0 (repository; the underlying ShareGPT, BWB and arXiv corpora have their own "
            "terms, only token counts are stored)"
        ),
        citation=(
            "project-etalon/etalon; the standard length traces of Vidur (Agrawal et al., MLSys "
            "2024) and Sarathi-Serve (Agrawal et al., OSDI 2024)"
        ),
        files=_github("etalon_length_stats", *_ETALON),
    ),
    TraceSource(
        name="sharegpt_mlenergy",
        description="1,000 ShareGPT first-turn prompts (text only, no responses)",
        url=_tree(*_MLENERGY),
        licence=(
            "Apache-2.0 (repository); the ShareGPT conversations themselves have no clear licence: "
            "use for benchmarking only"
        ),
        citation=(
            "ML.ENERGY Leaderboard (ml-energy/leaderboard-v2), prompts from the HF dataset "
            "anon8231489123/ShareGPT_Vicuna_unfiltered"
        ),
        files=_github("sharegpt_mlenergy", *_MLENERGY),
    ),
    TraceSource(
        name="bfcl_v4_data",
        description=(
            "Berkeley Function-Calling Leaderboard v4 (with the v3 multi-turn sets): tasks, "
            "ground-truth call sequences and tool docs (subset)"
        ),
        url=_tree(*_BFCL),
        licence="Apache-2.0",
        citation="Berkeley Function-Calling Leaderboard (BFCL) v4, ShishirPatil/gorilla",
        files=_github("bfcl_v4_data", *_BFCL),
    ),
    TraceSource(
        name="parrot_metagpt",
        description=(
            "Real MetaGPT multi-agent run on gpt-4-32k: layered 1 -> 8 -> 8 ... fan-out with "
            "token usage, 57 LLM calls"
        ),
        url=_tree(*_PARROT),
        licence="MIT",
        citation=(
            "Lin et al., 'Parrot: Efficient Serving of LLM-based Applications with Semantic "
            "Variable', OSDI 2024 (MetaGPT workload)"
        ),
        files=_github("parrot_metagpt", *_PARROT),
    ),
    TraceSource(
        name="lats_logs",
        description=(
            "LATS (WebShop) and ToT (HotpotQA) tree-search logs: generator samples and "
            "value-model calls"
        ),
        url=f"https://github.com/{_LATS[0]}/tree/{_LATS[1]}",
        licence="MIT",
        citation=(
            "Zhou et al., 'Language Agent Tree Search Unifies Reasoning, Acting, and Planning in "
            "Language Models', ICML 2024"
        ),
        files=_github(
            "lats_logs",
            *_LATS,
            renamed={
                "hotpot_tot_10it.log": "hotpot/tot_10it.log",
                "webshop_lats_example.log": "webshop/logs/example.log",
            },
        ),
    ),
    TraceSource(
        name="tracelab_example",
        description=(
            "19-round sanitized Claude Code / Codex session in the TraceLab format "
            "(schema example only)"
        ),
        url=f"https://github.com/{_TRACELAB[0]}/tree/{_TRACELAB[1]}/example_sessions/sanitized",
        licence="Apache-2.0 (repository; the full TraceLab dataset is CC-BY-4.0)",
        citation="TraceLab, uw-syfi/TraceLab",
        files=_github(
            "tracelab_example",
            *_TRACELAB,
            renamed={"round_trace.sanitized.jsonl": "example_sessions/sanitized/round_trace.jsonl"},
        ),
    ),
)


def get_source(name: str) -> TraceSource:
    """Return the public trace called ``name``.

    :param name: a source name, e.g. ``"mooncake"``.
    :raises KeyError: if no source has that name; the message lists the known names.
    """
    for source in SOURCES:
        if source.name == name:
            return source
    known = ", ".join(s.name for s in SOURCES)
    raise KeyError(f"unknown trace source {name!r}; expected one of: {known}")


def source_of(relpath: str) -> TraceSource | None:
    """Return the source whose files include ``relpath`` (or whose directory it is under).

    :param relpath: a path relative to the data directory, POSIX separators.
    """
    top = relpath.replace("\\", "/").split("/", 1)[0]
    for source in SOURCES:
        if source.name == top:
            return source
    return None


def sha256_of(path: str | Path) -> str:
    """SHA-256 digest of a file, as 64 lowercase hex digits.

    :param path: the file.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_status(data_dir: str | Path, file: SourceFile) -> str:
    """State of one file in a data directory.

    :param data_dir: the data directory.
    :param file: the expected file.
    :returns: ``"ok"``, ``"missing"``, ``"size mismatch (<n> bytes, expected <m>)"`` or
        ``"checksum mismatch"``.
    """
    path = Path(data_dir) / file.relpath
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != file.bytes:
        return f"size mismatch ({size} bytes, expected {file.bytes})"
    if sha256_of(path) != file.sha256:
        return "checksum mismatch"
    return "ok"


def verify(data_dir: str | Path, names: Sequence[str] | None = None) -> list[str]:
    """Check that a data directory holds byte-identical copies of the public traces.

    :param data_dir: the data directory.
    :param names: source names to check; all of :data:`SOURCES` when ``None``.
    :returns: one line per problem, ``"<relpath>: <status>"``; empty when everything matches.
    :raises KeyError: if a name is not a known source.
    """
    sources = SOURCES if names is None else tuple(get_source(n) for n in names)
    problems = []
    for source in sources:
        for file in source.files:
            status = file_status(data_dir, file)
            if status != "ok":
                problems.append(f"{file.relpath}: {status}")
    return problems


class MissingDataFileError(FileNotFoundError):
    """A trace file that a loader needs is not in the data directory.

    :param root: the data directory that was searched.
    :param relpath: the path of the file relative to ``root``.
    :param source: name of the public source the file belongs to, or ``None`` if unknown.
    """

    def __init__(self, root: Path, relpath: str, source: str | None) -> None:
        self.root = root
        self.relpath = relpath
        self.source = source
        path = root / relpath
        if source is None:
            where = (
                "It is not a file of any known public source (`python -m traces.sources` lists "
                "them)."
            )
        else:
            src = get_source(source)
            where = (
                f"It belongs to the public trace {source!r} ({src.url}; licence {src.licence}). "
                f"Fetch it with `python -m traces.download --data-dir {root} {source}`, or copy "
                f"the file there by hand."
            )
        super().__init__(f"missing trace file {str(path)!r}. {where}")


def require_file(relpath: str | Path, data_dir: str | Path | None = None) -> Path:
    """Path of a public trace file, checked to exist.

    :param relpath: path relative to the data directory, e.g. ``"mooncake/synthetic_trace.jsonl"``.
    :param data_dir: the data directory; ``SERVEGYM_DATA`` when ``None``.
    :returns: the absolute path of the file.
    :raises DataDirNotFoundError: when there is no data directory.
    :raises MissingDataFileError: when the file is not there; the message names the file, the
        public source it belongs to and how to fetch it.
    """
    root = resolve_data_dir(data_dir)
    rel = Path(relpath).as_posix()
    path = root / rel
    if not path.is_file():
        source = source_of(rel)
        raise MissingDataFileError(root, rel, source.name if source else None)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m traces.sources``: list the public traces and their state in the data dir."""
    parser = argparse.ArgumentParser(prog="python -m traces.sources", description=__doc__)
    parser.add_argument("--data-dir", help="data directory (default: $SERVEGYM_DATA)")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a file is missing or does not match"
    )
    args = parser.parse_args(argv)
    try:
        root: Path | None = resolve_data_dir(args.data_dir)
    except DataDirNotFoundError as err:
        root = None
        print(f"(no data directory: {err.reason})\n")
    bad = 0
    for source in SOURCES:
        total = sum(f.bytes for f in source.files)
        print(f"{source.name}  [{source.licence}]")
        print(f"  {source.description}")
        print(f"  {len(source.files)} files, {total / 2**20:.1f} MiB, {source.url}")
        print(f"  cite: {source.citation}")
        if root is not None:
            statuses = [(f, file_status(root, f)) for f in source.files]
            wrong = [(f, s) for f, s in statuses if s != "ok"]
            bad += len(wrong)
            print(f"  in {root}: {len(statuses) - len(wrong)}/{len(statuses)} ok")
            for f, s in wrong:
                print(f"    {f.relpath}: {s}")
    if root is None:
        return 1 if args.check else 0
    return 1 if (args.check and bad) else 0


if __name__ == "__main__":
    from traces.sources import main as _main

    sys.exit(_main())
