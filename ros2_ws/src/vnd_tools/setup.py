"""ament_python package that is also pip-installable (``pip install -e .``)."""

from setuptools import find_packages, setup

PACKAGE_NAME = "vnd_tools"

setup(
    name=PACKAGE_NAME,
    version="0.1.0",
    packages=find_packages(exclude=["test"]),
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE_NAME]),
        ("share/" + PACKAGE_NAME, ["package.xml"]),
    ],
    install_requires=[
        "vnd_core",
        "vnd_flight",
        "vnd_ros",
        "numpy>=1.24",
        "pyyaml>=6",
        "torch>=2.2,<3",
        "matplotlib>=3.7",
        "rich>=13",
        "cyclonedds>=11.0.1,<11.1",
    ],
    zip_safe=False,
    maintainer="VND flight stack developers",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [
            "vnd = vnd_tools.cli:main",
        ],
    },
)
