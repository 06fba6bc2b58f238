<#
.SYNOPSIS
Installs weftd as a Windows service, with the weft CNI plugin and its configuration.

.DESCRIPTION
Copies weftd.exe and weftctl.exe to -InstallDir and weft.exe (the CNI plugin) to
-CNIBinDir, installs the CNI configuration and the network config, and registers weftd as
the service -ServiceName (automatic start, restarted on failure, after HNS), then starts
it.

Idempotent: run it again with the same parameters and nothing changes; with other
parameters or newer binaries it updates what differs and restarts the service only then.
Stopping weftd leaves the HNS network, its policies and subnet.env in place, so a restart
does not interrupt pod traffic.

Flags the script does not know can be passed with -ExtraArgs; each weftd flag can also be
set as a WEFTD_<FLAG> variable of the service's environment (registry value
HKLM:\SYSTEM\CurrentControlSet\Services\<ServiceName>\Environment). Secrets (the etcd
password) go there rather than on the command line, which any user can read.

With -CNIOnly only the CNI plugin and its configuration are installed: the init
container of the weft-windows DaemonSet runs it so.

weftd logs to standard error, which the service control manager discards: to read its
log, stop the service and run the same command line (sc.exe qc weftd) in a console.

.PARAMETER SourceDir
Where weftd.exe, weftctl.exe and weft.exe are. Default: this script's directory.

.PARAMETER InstallDir
Where weftd.exe and weftctl.exe are installed. Default: C:\k.

.PARAMETER ServiceName
The service's name. Default: weftd.

.PARAMETER EtcdEndpoints
etcd endpoints (--etcd-endpoints), e.g. https://10.0.0.5:2379. Not with -KubeSubnetMgr.

.PARAMETER EtcdPrefix
etcd prefix of the network config and leases (--etcd-prefix). Default: weftd's,
/coreos.com/network.

.PARAMETER EtcdCAFile
CA bundle that signed etcd's certificate (--etcd-cafile).

.PARAMETER EtcdCertFile
Client certificate for etcd (--etcd-certfile).

.PARAMETER EtcdKeyFile
Key of the client certificate (--etcd-keyfile).

.PARAMETER EtcdUsername
etcd user name (--etcd-username).

.PARAMETER EtcdPassword
etcd password: stored as WEFTD_ETCD_PASSWORD in the service's environment, not on its
command line.

.PARAMETER KubeSubnetMgr
Kubernetes mode (--kube-subnet-mgr): the node's subnet is its pod CIDR, and the network
config a file (-NetConfPath).

.PARAMETER KubeConfigFile
kubeconfig for Kubernetes mode (--kubeconfig-file). Required with -KubeSubnetMgr: a service
has no in-cluster credentials.

.PARAMETER NodeName
The Node object of this node in Kubernetes mode, given to weftd as NODE_NAME. Default: the
computer name in lower case, as kubelet names the node.

.PARAMETER NetConfFile
A net-conf.json to install as -NetConfPath (Kubernetes mode). Omit it to keep the file
that is there.

.PARAMETER NetConfPath
Where weftd reads the network config in Kubernetes mode (--net-config-path). Default:
C:\etc\kube-flannel\net-conf.json.

.PARAMETER Iface
Interfaces (names or addresses) for inter-node traffic, tried in order (--iface). Default:
the interface of the default route.

.PARAMETER IfaceRegex
Regular expressions matching the interface name or address (--iface-regex).

.PARAMETER PublicIP
The address other nodes reach this one on (--public-ip). Default: the interface's.

.PARAMETER SubnetFile
Where weftd writes subnet.env for the CNI plugin (--subnet-file); hns.json and sourceVip.json
go next to it, and sourceVip.json also to C:\k\sourceVip.json (--source-vip-file). Default: C:\run\flannel\subnet.env, flannel's.

.PARAMETER IPMasq
Masquerade pod traffic leaving the cluster network (--ip-masq): the CNI plugin then asks
the delegate for outbound NAT.

.PARAMETER HealthzIP
Address of /healthz, /readyz, /status and /metrics (--healthz-ip). Default: weftd's,
127.0.0.1.

.PARAMETER HealthzPort
Their port (--healthz-port). Default: weftd's, 8285.

.PARAMETER ExtraArgs
More weftd flags, each a whole argument, e.g. '--hns-peers=auto'.

.PARAMETER CNIBinDir
Where the container runtime finds CNI plugins: weft.exe goes there, next to win-overlay.exe
or win-bridge.exe and host-local.exe, which must be there too. Default: C:\opt\cni\bin.

.PARAMETER CNIConfDir
Where the container runtime reads CNI configurations. Default: C:\etc\cni\net.d.

.PARAMETER CNIConfigFile
The CNI configuration to install as 10-weft.conflist in -CNIConfDir (dist\cni\10-weft-windows.conflist
is a sample). flannel's 10-flannel.conf or 10-flannel.conflist there is renamed
*.disabled-by-weft, so that the runtime uses weft's. Omit it to leave the CNI
configuration as it is.

.PARAMETER CNIOnly
Install only weft.exe and the CNI configuration; no service.

.PARAMETER NoStart
Install or update the service without starting it.

.PARAMETER Uninstall
Stop and delete the service. The files, the HNS network and subnet.env stay, so that pods
keep their network; delete them by hand if the node is done with weft.

.EXAMPLE
.\install-weftd.ps1 -EtcdEndpoints https://10.0.0.5:2379 -EtcdCAFile C:\k\etcd-ca.pem -EtcdCertFile C:\k\node.pem -EtcdKeyFile C:\k\node-key.pem -Iface Ethernet -CNIConfigFile .\10-weft-windows.conflist

.EXAMPLE
.\install-weftd.ps1 -KubeSubnetMgr -KubeConfigFile C:\k\weft.kubeconfig -NetConfFile .\net-conf.json -CNIConfigFile .\10-weft-windows.conflist

.EXAMPLE
.\install-weftd.ps1 -Uninstall
#>
[CmdletBinding()]
param(
    [string]$SourceDir = $PSScriptRoot,
    [string]$InstallDir = 'C:\k',
    [string]$ServiceName = 'weftd',

    [string[]]$EtcdEndpoints,
    [string]$EtcdPrefix,
    [string]$EtcdCAFile,
    [string]$EtcdCertFile,
    [string]$EtcdKeyFile,
    [string]$EtcdUsername,
    [string]$EtcdPassword,

    [switch]$KubeSubnetMgr,
    [string]$KubeConfigFile,
    [string]$NodeName = $env:COMPUTERNAME.ToLowerInvariant(),
    [string]$NetConfFile,
    [string]$NetConfPath = 'C:\etc\kube-flannel\net-conf.json',

    [string[]]$Iface,
    [string[]]$IfaceRegex,
    [string]$PublicIP,
    [string]$SubnetFile = 'C:\run\flannel\subnet.env',
    [switch]$IPMasq,
    [string]$HealthzIP,
    [int]$HealthzPort = 0,
    [string[]]$ExtraArgs,

    [string]$CNIBinDir = 'C:\opt\cni\bin',
    [string]$CNIConfDir = 'C:\etc\cni\net.d',
    [string]$CNIConfigFile,

    [switch]$CNIOnly,
    [switch]$NoStart,
    [switch]$Uninstall
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'

# Install-File copies $Source to $Destination unless they are already the same, and says
# whether it changed anything. The new file is written next to the destination and moved
# over it, so that the runtime, which may read the configuration or start the plugin at
# any moment, never sees half a file. A running executable cannot be replaced but can be
# renamed: it is moved aside first and removed on a later run.
function Install-File([string]$Source, [string]$Destination) {
    if (-not (Test-Path -LiteralPath $Source -PathType Leaf)) {
        throw "install ${Destination}: source $Source does not exist"
    }
    # .NET resolves relative paths against the process's directory, not PowerShell's.
    $Destination = $ExecutionContext.SessionState.Path.GetUnresolvedProviderPathFromPSPath($Destination)
    $dir = Split-Path -Parent $Destination
    New-Item -ItemType Directory -Force -Path $dir | Out-Null
    $old = "$Destination.old"
    Remove-Item -LiteralPath $old -Force -ErrorAction SilentlyContinue
    if ((Test-Path -LiteralPath $Destination -PathType Leaf) -and
        (Get-FileHash -LiteralPath $Source).Hash -eq (Get-FileHash -LiteralPath $Destination).Hash) {
        return $false
    }
    $tmp = "$Destination.weft-tmp"
    Copy-Item -LiteralPath $Source -Destination $tmp -Force
    if (Test-Path -LiteralPath $Destination) {
        try {
            [System.IO.File]::Replace($tmp, $Destination, $null)
        } catch {
            Move-Item -LiteralPath $Destination -Destination $old -Force
            Move-Item -LiteralPath $tmp -Destination $Destination
        }
    } else {
        Move-Item -LiteralPath $tmp -Destination $Destination
    }
    Write-Host "installed $Destination"
    return $true
}

# Install-CNI installs the plugin and, if given, its configuration; flannel's
# configuration would sort first and win, so it is renamed out of the runtime's sight
# (flannel's installer writes it again on a rollback).
function Install-CNI {
    Install-File (Join-Path $SourceDir 'weft.exe') (Join-Path $CNIBinDir 'weft.exe') | Out-Null
    if (-not $CNIConfigFile) {
        Write-Host "no -CNIConfigFile: the CNI configuration in $CNIConfDir is left as it is"
        return
    }
    $conf = Get-Content -Raw -LiteralPath $CNIConfigFile | ConvertFrom-Json
    $keys = @($conf.PSObject.Properties.Name)
    if ($keys -notcontains 'name' -or $keys -notcontains 'plugins') {
        throw "-CNIConfigFile ${CNIConfigFile}: not a CNI configuration list (no name or plugins)"
    }
    Install-File $CNIConfigFile (Join-Path $CNIConfDir '10-weft.conflist') | Out-Null
    foreach ($name in '10-flannel.conf', '10-flannel.conflist') {
        $path = Join-Path $CNIConfDir $name
        if (Test-Path -LiteralPath $path) {
            Move-Item -LiteralPath $path -Destination "$path.disabled-by-weft" -Force
            Write-Host "set aside flannel's $path"
        }
    }
}

# Quote-Arg quotes one argument for a Windows command line (CommandLineToArgvW's rules).
function Quote-Arg([string]$Arg) {
    if ($Arg -notmatch '[\s"]' -and $Arg -ne '') {
        return $Arg
    }
    return '"' + ($Arg -replace '(\\*)"', '$1$1\"' -replace '(\\+)$', '$1$1') + '"'
}

function Get-WeftdArgs {
    $a = New-Object System.Collections.Generic.List[string]
    if ($KubeSubnetMgr) {
        if ($EtcdEndpoints) { throw '-EtcdEndpoints: not with -KubeSubnetMgr' }
        if (-not $KubeConfigFile) { throw '-KubeConfigFile: required with -KubeSubnetMgr (a service has no in-cluster credentials)' }
        $a.Add('--kube-subnet-mgr')
        $a.Add("--kubeconfig-file=$KubeConfigFile")
        $a.Add("--net-config-path=$NetConfPath")
    } else {
        if (-not $EtcdEndpoints) { throw '-EtcdEndpoints: required (or -KubeSubnetMgr)' }
        $a.Add('--etcd-endpoints=' + ($EtcdEndpoints -join ','))
        if ($EtcdPrefix) { $a.Add("--etcd-prefix=$EtcdPrefix") }
        if ($EtcdCAFile) { $a.Add("--etcd-cafile=$EtcdCAFile") }
        if ($EtcdCertFile) { $a.Add("--etcd-certfile=$EtcdCertFile") }
        if ($EtcdKeyFile) { $a.Add("--etcd-keyfile=$EtcdKeyFile") }
        if ($EtcdUsername) { $a.Add("--etcd-username=$EtcdUsername") }
    }
    foreach ($i in @($Iface)) { if ($i) { $a.Add("--iface=$i") } }
    foreach ($r in @($IfaceRegex)) { if ($r) { $a.Add("--iface-regex=$r") } }
    if ($PublicIP) { $a.Add("--public-ip=$PublicIP") }
    $a.Add("--subnet-file=$SubnetFile")
    if ($IPMasq) { $a.Add('--ip-masq') }
    if ($HealthzIP) { $a.Add("--healthz-ip=$HealthzIP") }
    if ($HealthzPort -ne 0) { $a.Add("--healthz-port=$HealthzPort") }
    foreach ($x in @($ExtraArgs)) { if ($x) { $a.Add($x) } }
    return $a
}

# The service's environment: variables weftd reads that do not belong on a command line.
function Get-ServiceEnvironment {
    $envs = @()
    if ($KubeSubnetMgr) { $envs += "NODE_NAME=$NodeName" }
    if ($EtcdPassword) { $envs += "WEFTD_ETCD_PASSWORD=$EtcdPassword" }
    return , $envs
}

function Wait-ServiceStatus([string]$Status) {
    $svc = Get-Service -Name $ServiceName
    try {
        $svc.WaitForStatus($Status, [TimeSpan]::FromSeconds(60))
    } catch {
        throw "service ${ServiceName}: not $Status after 60 s (now $($svc.Status))"
    }
}

$principal = New-Object Security.Principal.WindowsPrincipal([Security.Principal.WindowsIdentity]::GetCurrent())
if (-not $principal.IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)) {
    throw 'install-weftd.ps1 must run as an administrator'
}

if ($Uninstall) {
    $svc = Get-Service -Name $ServiceName -ErrorAction SilentlyContinue
    if ($null -eq $svc) {
        Write-Host "service $ServiceName is not installed"
        exit 0
    }
    if ($svc.Status -ne 'Stopped') {
        Stop-Service -Name $ServiceName
        Wait-ServiceStatus 'Stopped'
    }
    & sc.exe delete $ServiceName | Out-Null
    if ($LASTEXITCODE -ne 0) { throw "sc.exe delete ${ServiceName}: exit status $LASTEXITCODE" }
    Write-Host "service $ServiceName deleted; the HNS network, subnet.env and the files stay"
    exit 0
}

Install-CNI
if ($CNIOnly) {
    exit 0
}

# Everything is checked before the running service is touched.
$weftdArgs = Get-WeftdArgs
$serviceEnv = Get-ServiceEnvironment
$exe = Join-Path $InstallDir 'weftd.exe'
$binPath = (@($exe) + $weftdArgs | ForEach-Object { Quote-Arg $_ }) -join ' '

$svc = Get-Service -Name $ServiceName -ErrorAction SilentlyContinue
$changed = $false
# weftd.exe cannot be replaced while it runs, and stopping it costs no traffic.
$newBinary = -not (Test-Path -LiteralPath $exe) -or
    (Get-FileHash -LiteralPath (Join-Path $SourceDir 'weftd.exe')).Hash -ne (Get-FileHash -LiteralPath $exe).Hash
if ($newBinary -and $null -ne $svc -and $svc.Status -ne 'Stopped') {
    Stop-Service -Name $ServiceName
    Wait-ServiceStatus 'Stopped'
}
if (Install-File (Join-Path $SourceDir 'weftd.exe') $exe) { $changed = $true }
Install-File (Join-Path $SourceDir 'weftctl.exe') (Join-Path $InstallDir 'weftctl.exe') | Out-Null
if ($KubeSubnetMgr -and $NetConfFile) {
    if (Install-File $NetConfFile $NetConfPath) { $changed = $true }
}
New-Item -ItemType Directory -Force -Path (Split-Path -Parent $SubnetFile) | Out-Null

if ($null -eq $svc) {
    New-Service -Name $ServiceName -BinaryPathName $binPath -StartupType Automatic `
        -DisplayName 'weft node network daemon' `
        -Description 'weft: leases this node''s pod subnet and programs HNS so that every pod reaches every pod (flanneld replacement).' | Out-Null
    Write-Host "service $ServiceName created"
    $changed = $true
} else {
    # Through WMI rather than sc.exe: Windows PowerShell mangles the quotes of arguments
    # to native programs, and the command line may hold some.
    $cim = Get-CimInstance -ClassName Win32_Service -Filter "Name='$ServiceName'"
    if ($cim.PathName -ne $binPath) {
        $r = Invoke-CimMethod -InputObject $cim -MethodName Change -Arguments @{ PathName = $binPath }
        if ($r.ReturnValue -ne 0) { throw "service ${ServiceName}: changing its command line failed with Win32_Service error $($r.ReturnValue)" }
        Write-Host "service ${ServiceName}: command line now $binPath"
        $changed = $true
    }
    if ($cim.StartMode -ne 'Auto') {
        Set-Service -Name $ServiceName -StartupType Automatic
    }
}

# HNS must be up before weftd asks it for anything.
& sc.exe config $ServiceName depend= hns | Out-Null
if ($LASTEXITCODE -ne 0) { throw "sc.exe config $ServiceName depend= hns: exit status $LASTEXITCODE" }
# Restart on every failure, 5 s later, as systemd's Restart=always does; the failure flag
# makes an exit with an error count as a failure, not only a crash.
& sc.exe failure $ServiceName reset= 86400 actions= restart/5000/restart/5000/restart/5000 | Out-Null
if ($LASTEXITCODE -ne 0) { throw "sc.exe failure ${ServiceName}: exit status $LASTEXITCODE" }
& sc.exe failureflag $ServiceName 1 | Out-Null
if ($LASTEXITCODE -ne 0) { throw "sc.exe failureflag ${ServiceName}: exit status $LASTEXITCODE" }

$key = "HKLM:\SYSTEM\CurrentControlSet\Services\$ServiceName"
$item = Get-ItemProperty -Path $key
$currentEnv = @()
if (@($item.PSObject.Properties.Name) -contains 'Environment') {
    $currentEnv = @($item.Environment | Where-Object { $_ })
}
if (($currentEnv -join "`n") -ne ($serviceEnv -join "`n")) {
    if ($serviceEnv.Count -eq 0) {
        Remove-ItemProperty -Path $key -Name Environment -ErrorAction SilentlyContinue
    } else {
        Set-ItemProperty -Path $key -Name Environment -Type MultiString -Value $serviceEnv
    }
    $changed = $true
}

if ($NoStart) {
    Write-Host "service $ServiceName installed, not started (-NoStart)"
    exit 0
}
$svc = Get-Service -Name $ServiceName
if ($changed -and $svc.Status -ne 'Stopped') {
    Restart-Service -Name $ServiceName
} elseif ($svc.Status -ne 'Running') {
    Start-Service -Name $ServiceName
}
Wait-ServiceStatus 'Running'
Write-Host "service $ServiceName running: weftctl status shows how it is doing"
