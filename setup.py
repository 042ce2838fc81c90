"""ament_python package: builds with colcon in a ROS 2 workspace and installs with pip."""

from glob import glob
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

PACKAGE = "gpu_euclidean_cluster"
#: the source checkout; colcon --symlink-install runs setup.py through a symlink in build/<package>
HERE = Path(__file__).resolve().parent

#: console scripts that ``ros2 run`` / launch_ros start, through the wrappers in libexec/
ROS_EXECUTABLES = ["euclidean_cluster_node", "replay"]
#: the top-level module that puts the venv on AMENT_PREFIX_PATH at interpreter start, and the
#: .pth file in site-packages whose one line runs it (see the module's docstring)
AMENT_HOOK = "_gpu_euclidean_cluster_ament"
AMENT_PTH = f"{PACKAGE}_ament.pth"
AMENT_PTH_LINE = f"import {AMENT_HOOK}; {AMENT_HOOK}.add_this_prefix()\n"


class AmentDistribution(Distribution):
    """Also install ``data_files`` (ament index marker, package.xml, launch, config, the
    lib/<package>/ wrappers) in PEP 660 editable installs (``pip install -e .``).

    setuptools' ``editable_wheel`` installs the data category only when the distribution answers
    ``has_data()``, which setuptools' Distribution does not define (it has ``has_data_files()``),
    so without this the editable wheel silently carries no data files.
    """

    def has_data(self) -> bool:
        return self.has_data_files()


class BuildPyWithAmentPth(build_py):
    """Also write :data:`AMENT_PTH` at the root of what goes into site-packages.

    That is ``build_lib`` for a wheel (``pip install .``) and ``setup.py install`` (colcon, where
    it lands in the install space's site-packages, which Python does not scan for ``.pth`` files:
    there ``install/setup.bash`` sets ``AMENT_PREFIX_PATH``). A PEP 660 editable wheel
    (``pip install -e .``) carries none of ``build_lib``'s files; in that build the file goes
    straight into the wheel's root, the ``install_lib`` that setuptools' ``editable_wheel`` sets.
    """

    def run(self) -> None:
        super().run()
        folder = Path(self._pth_folder())
        folder.mkdir(parents=True, exist_ok=True)
        (folder / AMENT_PTH).write_text(AMENT_PTH_LINE, encoding="utf-8")

    def _pth_folder(self) -> str:
        if self.editable_mode:
            return self.get_finalized_command("install").install_lib
        return self.build_lib

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        """The built files, the ``.pth`` file included (``install --record`` lists it)."""
        outputs = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs
        return [*outputs, str(Path(self.build_lib, AMENT_PTH))]


ROS_WHEELS = [
    "ros-rclpy",
    "ros-sensor-msgs",
    "ros-visualization-msgs",
    "ros-diagnostic-msgs",
    "ros-std-srvs",
    "ros-rmw-fastrtps-cpp",
]

setup(
    name=PACKAGE,
    version="0.1.0",
    description="GPU Euclidean cluster extraction for LiDAR point clouds, with a ROS 2 node",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    # the library only: benchmarks/ (run from a checkout, `python -m benchmarks`) and test/ stay out
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    py_modules=[AMENT_HOOK],
    package_data={
        PACKAGE: [
            "cuda/kernels/*.cu",
            "cuda/kernels/*.cuh",
            "pointcloud_io/velodyne/msg/*.msg",
            "pointcloud_io/velodyne/msg/LICENSE",
        ]
    },
    distclass=AmentDistribution,
    cmdclass={"build_py": BuildPyWithAmentPth},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        # ros2 run / launch_ros find executables in <prefix>/lib/<package>/ (see libexec/)
        (f"lib/{PACKAGE}", [f"libexec/{name}" for name in ROS_EXECUTABLES]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py") + glob("launch/*.launch.xml")),
        (
            f"share/{PACKAGE}/config",
            glob("config/*.yaml") + glob("config/*.xml") + glob("config/*.json"),
        ),
        # nebula's calibration and sensor parameter files (Apache-2.0, LICENSE and NOTICE beside)
        (f"share/{PACKAGE}/config/velodyne", glob("config/velodyne/*")),
        (f"share/{PACKAGE}/config/hesai", glob("config/hesai/*")),
    ],
    # rosbags: its readers' decompressors are wrapped with bounded ones (pointcloud_io/bag_chunks)
    install_requires=[
        "numpy>=1.22",
        "scipy>=1.8",
        "matplotlib>=3.5",
        "rosbags>=0.11.9,<0.12",
        "lz4>=4",
        "backports.zstd>=1.0; python_version<'3.14'",
    ],
    extras_require={
        # CuPy wheels are per CUDA major version: cupy-cuda12x for CUDA 12 drivers/toolkits,
        # cupy-cuda13x for CUDA 13. Install the one matching `nvidia-smi` instead of this extra
        # when your driver is CUDA 13: pip install cupy-cuda13x.
        "gpu": ["cupy-cuda12x>=13"],
        "ros": ROS_WHEELS,
        "test": ["pytest>=7", "ruff>=0.4", "hypothesis>=6"],
    },
    zip_safe=True,
    entry_points={
        "console_scripts": [
            "gpu-euclidean-cluster = gpu_euclidean_cluster.commands.cli:main",
            "euclidean_cluster_node = gpu_euclidean_cluster.ros.node.node:main",
            "replay = gpu_euclidean_cluster.ros.replay.replay:main",
        ],
    },
)
